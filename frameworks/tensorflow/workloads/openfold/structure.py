"""AlphaFold2's structure module in Keras 3: invariant point attention, backbone updates
and the torsion-angle side chains, one set of weights applied ``sm_blocks`` times
(AF2 supplement §1.8, Algorithms 20–25; shared/spec/openfold.md §3) — the mirror of
``sciperf_pytorch.workloads.openfold.structure``. The iterations run as one
``tf.while_loop``, so a traced graph holds a single iteration (:class:`StructureModule`).

Frames start at the identity ("black hole" start) and are kept as unit quaternions plus
translations in internal units (nm-like); outputs scale translations by
``trans_scale_factor`` (10) to Å. Between iterations the rotation is detached, so each
iteration's rotation gradient stays local (Algorithm 20, line 20).

Side chains: the 7 predicted (sin, cos) torsions rotate the literature rigid-group
frames of each residue type about their x axes; χ2–χ4 chain onto χ1; atom14 positions are
the literature positions in their group's frame (residue constants from
:mod:`sciperf.workloads.openfold.residue_constants`).

Precision: the whole module runs in full precision — every layer is built with
``dtype=full_precision()`` and the inputs are cast to it — so under a mixed bf16 policy
the frames, points and distances are float32, and under a float64 policy float64. Frames
accumulate error over the iterations and IPA's point distances are differences of large
coordinates; half precision would swamp both.

Outputs per iteration, stacked on dim 1: ``frames`` [B, I, N, 7] (quaternion w-first,
translation in Å), ``sidechain_frames`` [B, I, N, 8, 4, 4], ``unnormalized_angles`` and
``angles`` [B, I, N, 7, 2], ``positions`` [B, I, N, 14, 3], ``states`` [B, I, N, c_s];
and ``single`` [B, N, c_s], the last iteration's s. The residue count N may be dynamic:
reshapes go through ``tf.shape``.

Names: layers are named by their reference module path, ``.`` spelled ``__``
(:func:`~sciperf_tensorflow.workloads.openfold.primitives.child`), and created in the
reference's order, so the generic Keras weight mapper writes exactly the
``structure_module/...`` entries of ``ModelSpec.weight_shapes()``.
"""

from __future__ import annotations

import math
from functools import lru_cache

import keras
import numpy as np
import tensorflow as tf

from sciperf.workloads.openfold import residue_constants as rc
from sciperf.workloads.openfold.sizes import ModelSpec
from sciperf_tensorflow.workloads.openfold.primitives import (
    Block,
    Dense,
    FreeVector,
    SharedDropout,
    child,
    current_seed,
    dropout_seed,
    full_precision,
    layer_norm,
)
from sciperf_tensorflow.workloads.openfold.rigids import (
    Rigid,
    compose_quat_update,
    identity_quaternion,
    quat_to_rot,
)

__all__ = ["InvariantPointAttention", "StructureModule", "atom14_to_atom37",
           "frames_to_atom14", "torsion_angles_to_frames"]

SOFTPLUS_INVERSE_1 = 0.541324854612918  # softplus⁻¹(1): point weights start at 1

# Iteration i's dropout seed is the module's seed + [0, i·2³²]: the layers' salts (added to
# the same component) are < 2³¹, so no iteration's mask stream meets another layer's.
ITERATION_SEED_STRIDE = 1 << 32


def _dropout(p: float, name: str) -> SharedDropout:
    """Plain (unshared) dropout kept in full precision: a layer built under a mixed policy
    would cast its float32 input down to bf16 on the way in."""
    layer = SharedDropout(p, name)
    layer.dtype_policy = full_precision()
    layer.built = True  # stateless: nothing to build
    return layer


def _split_last(x: tf.Tensor, *sizes: int) -> tf.Tensor:
    """`x` [*, Π sizes] viewed as [*, *sizes] (the leading dims may be dynamic)."""
    return tf.reshape(x, tf.concat([tf.shape(x)[:-1], list(sizes)], 0))


def _merge_last(x: tf.Tensor, n: int) -> tf.Tensor:
    """`x` [*, d1, …, dn] viewed as [*, d1·…·dn] (the last `n` dims must be static)."""
    size = math.prod(x.shape[-n:].as_list())
    return tf.reshape(x, tf.concat([tf.shape(x)[:-n], [size]], 0))


class _Built(Block):
    """A Block whose weights all exist once it is constructed (children make theirs in
    their constructors), so building it is a no-op. Keras' default build would first run
    the whole ``call`` symbolically to look for unbuilt state: about half the structure
    module's trace time."""

    def build(self, input_shape: object = None) -> None:
        self.built = True


class InvariantPointAttention(_Built):
    """IPA (Algorithm 22): attention from scalar q·k, the pair bias and the distances of
    query/key points placed in the residues' frames; outputs scalar, point (back in the
    local frame, with norms) and pair channels.

    Weight layouts the checkpoint fixes: ``linear_kv`` holds k then v per head;
    ``linear_*_points`` hold all x, then all y, then all z coordinates; ``linear_out``
    reads [scalar | point x | point y | point z | point norm | pair]. Inputs carry one
    batch dim: s [B, N, c_s], z [B, N, N, c_z], frames [B, N], mask [B, N]; ``frames`` (a
    :class:`Rigid`, not a tensor) must be passed by keyword — Keras takes only tensors
    positionally.
    """

    def __init__(self, spec: ModelSpec, path: str) -> None:
        dtype = full_precision()
        super().__init__(name=path, dtype=dtype)
        c_s, heads, hidden = spec.c_s, spec.num_heads_ipa, spec.c_hidden_ipa
        self.heads, self.hidden = heads, hidden
        self.qk_points, self.v_points = spec.num_qk_points, spec.num_v_points
        self.inf, self.eps = spec.sm_inf, spec.sm_eps
        # the module's own parameter precedes its children's, as in the reference order
        self.head_weights = FreeVector(heads, SOFTPLUS_INVERSE_1,
                                       child(path, "head_weights"), dtype=dtype)
        self.head_weights.built = True  # its vector is made in __init__
        self.linear_q = Dense(c_s, heads * hidden, child(path, "linear_q"), dtype=dtype)
        self.linear_kv = Dense(c_s, 2 * heads * hidden, child(path, "linear_kv"), dtype=dtype)
        self.linear_q_points = Dense(c_s, heads * self.qk_points * 3,
                                     child(path, "linear_q_points"), dtype=dtype)
        self.linear_kv_points = Dense(c_s, heads * (self.qk_points + self.v_points) * 3,
                                      child(path, "linear_kv_points"), dtype=dtype)
        self.linear_b = Dense(spec.c_z, heads, child(path, "linear_b"), dtype=dtype)
        self.linear_out = Dense(heads * (spec.c_z + hidden + 4 * self.v_points), c_s,
                                child(path, "linear_out"), init="final", dtype=dtype)

    def compute_mask(self, inputs: tf.Tensor, previous_mask: tf.Tensor | None = None) -> None:
        """Keras reads a ``mask`` keyword as a propagated Keras mask (and warns that a layer
        without ``compute_mask`` drops it); here it is the residue mask, consumed by the
        call, so the output carries none."""
        return None

    def _points(self, linear: keras.layers.Dense, s: tf.Tensor, frames: Rigid) -> tf.Tensor:
        """Points [B, N, H, P, 3] in global coordinates (layout: x block, y block, z block)."""
        raw = linear(s)
        pts = tf.stack(tf.split(raw, 3, axis=-1), axis=-1)  # [B, N, H·P, 3]
        pts = frames.unsqueeze(-1).apply(pts)
        return tf.reshape(pts, tf.concat([tf.shape(pts)[:-2], [self.heads, -1, 3]], 0))

    def call(self, s: tf.Tensor, z: tf.Tensor, frames: Rigid, mask: tf.Tensor) -> tf.Tensor:
        h, c = self.heads, self.hidden
        q = _split_last(self.linear_q(s), h, c)  # [B, N, H, C]
        k, v = tf.split(_split_last(self.linear_kv(s), h, 2 * c), 2, axis=-1)
        q_pts = self._points(self.linear_q_points, s, frames)
        k_pts, v_pts = tf.split(self._points(self.linear_kv_points, s, frames),
                                [self.qk_points, self.v_points], axis=-2)

        logits = tf.einsum("bihc,bjhc->bhij", q, k)  # [B, H, N, N]
        logits = logits * math.sqrt(1.0 / (3 * c))
        logits = logits + math.sqrt(1.0 / 3) * tf.transpose(self.linear_b(z), [0, 3, 1, 2])
        diff = q_pts[:, :, None] - k_pts[:, None]  # [B, N, N, H, P, 3]
        # tf.square, not ** 2 (here and below): in the while loop's gradient grappler left
        # Pow's gradient a real, slow Pow over [B, N, N, H, P, 3]
        d2 = tf.reduce_sum(tf.square(diff), axis=-1)  # [B, N, N, H, P]
        # .call(): Keras' __call__ wants an input tensor, the vector takes none
        weights = tf.nn.softplus(self.head_weights.call()) * math.sqrt(
            1.0 / (3 * (self.qk_points * 9.0 / 2)))
        pt_logits = -0.5 * tf.reduce_sum(d2 * weights[:, None], axis=-1)  # [B, N, N, H]
        mask = tf.cast(mask, s.dtype)
        square_mask = (mask[..., :, None] * mask[..., None, :] - 1.0) * self.inf
        logits = logits + tf.transpose(pt_logits, [0, 3, 1, 2]) + square_mask[:, None]
        a = tf.nn.softmax(logits, axis=-1)  # [B, H, N(i), N(j)]

        o = tf.einsum("bhij,bjhc->bihc", a, v)  # [B, N, H, C]
        o_pt = tf.einsum("bhij,bjhpx->bihpx", a, v_pts)  # [B, N, H, Pv, 3]
        o_pt = frames[:, :, None, None].invert_apply(o_pt)
        o_pt_norm = _merge_last(tf.sqrt(tf.reduce_sum(tf.square(o_pt), axis=-1) + self.eps), 2)
        o_pt = tf.reshape(o_pt, tf.concat([tf.shape(o_pt)[:-3], [h * self.v_points, 3]], 0))
        o_pair = tf.einsum("bhij,bijc->bihc", a, z)  # [B, N, H, c_z]
        out = tf.concat([_merge_last(o, 2), *tf.unstack(o_pt, num=3, axis=-1), o_pt_norm,
                         _merge_last(o_pair, 2)], axis=-1)
        return self.linear_out(out)


class SingleTransition(_Built):
    """s + Linear(ReLU(Linear(ReLU(Linear(s))))), dropout, LN.

    One dropout layer serves every structure-module iteration: its masks differ between
    iterations because :class:`StructureModule` folds the iteration into the seed."""

    def __init__(self, spec: ModelSpec, path: str) -> None:
        dtype = full_precision()
        super().__init__(name=path, dtype=dtype)
        c = spec.c_s
        self.linear_1 = Dense(c, c, child(path, "linear_1"), init="relu", dtype=dtype)
        self.linear_2 = Dense(c, c, child(path, "linear_2"), init="relu", dtype=dtype)
        self.linear_3 = Dense(c, c, child(path, "linear_3"), init="final", dtype=dtype)
        self.dropout = _dropout(spec.sm_dropout, child(path, "dropout"))
        self.layer_norm = layer_norm(c, child(path, "layer_norm"), spec.layer_norm_eps,
                                     dtype=dtype)

    def call(self, s: tf.Tensor, training: bool = False) -> tf.Tensor:
        s = s + self.linear_3(tf.nn.relu(self.linear_2(tf.nn.relu(self.linear_1(s)))))
        return self.layer_norm(self.dropout(s, training=training))


class BackboneUpdate(_Built):
    """Linear(c_s → 6): quaternion vector part (b, c, d) and translation (zero init)."""

    def __init__(self, spec: ModelSpec, path: str) -> None:
        dtype = full_precision()
        super().__init__(name=path, dtype=dtype)
        self.linear = Dense(spec.c_s, 6, child(path, "linear"), init="final", dtype=dtype)

    def call(self, s: tf.Tensor) -> tf.Tensor:
        return self.linear(s)


class AngleResnetBlock(_Built):
    def __init__(self, c: int, path: str) -> None:
        dtype = full_precision()
        super().__init__(name=path, dtype=dtype)
        self.linear_1 = Dense(c, c, child(path, "linear_1"), init="relu", dtype=dtype)
        self.linear_2 = Dense(c, c, child(path, "linear_2"), init="final", dtype=dtype)

    def call(self, a: tf.Tensor) -> tf.Tensor:
        return a + self.linear_2(tf.nn.relu(self.linear_1(tf.nn.relu(a))))


class AngleResnet(_Built):
    """(sin, cos) of the 7 torsions from s and the initial s; normalised, and also
    returned raw for the angle-norm loss. The ReLUs on the inputs are DeepMind's code's
    (absent from the supplement's pseudocode).

    The residual blocks are named ``layers__<j>`` as the reference's ``layers`` list but
    held in ``blocks``: ``layers`` is :class:`Block`'s read-only list of sublayers.
    """

    def __init__(self, spec: ModelSpec, path: str) -> None:
        dtype = full_precision()
        super().__init__(name=path, dtype=dtype)
        c, self.num_angles, self.eps = spec.c_hidden_angle, spec.num_angles, spec.sm_eps
        self.linear_in = Dense(spec.c_s, c, child(path, "linear_in"), dtype=dtype)
        self.linear_initial = Dense(spec.c_s, c, child(path, "linear_initial"), dtype=dtype)
        self.blocks = [AngleResnetBlock(c, child(path, f"layers__{j}"))
                       for j in range(spec.angle_blocks)]
        self.linear_out = Dense(c, 2 * spec.num_angles, child(path, "linear_out"),
                                dtype=dtype)

    def call(self, s: tf.Tensor, s_initial: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        a = self.linear_in(tf.nn.relu(s)) + self.linear_initial(tf.nn.relu(s_initial))
        for block in self.blocks:
            a = block(a)
        raw = _split_last(self.linear_out(tf.nn.relu(a)), self.num_angles, 2)
        norm = tf.sqrt(tf.maximum(tf.reduce_sum(tf.square(raw), axis=-1, keepdims=True),
                                  tf.cast(self.eps, raw.dtype)))
        return raw, raw / norm


@lru_cache(maxsize=1)
def _np_tables() -> dict[str, np.ndarray]:
    return {"default_frames": np.asarray(rc.RESTYPE_RIGID_GROUP_DEFAULT_FRAME, np.float64),
            "group_idx": np.asarray(rc.RESTYPE_ATOM14_TO_RIGID_GROUP, np.int32),
            "atom_mask": np.asarray(rc.RESTYPE_ATOM14_MASK, np.float64),
            "lit_positions": np.asarray(rc.RESTYPE_ATOM14_RIGID_GROUP_POSITIONS, np.float64)}


def _tables(dtype: tf.DType) -> dict[str, tf.Tensor]:
    """Residue-constant tables as tensors of `dtype` (indices int32), no layer weights.
    Only the numpy arrays are cached: a cached tensor made inside one ``tf.function``
    graph would leak into the next."""
    return {name: tf.constant(a, dtype=tf.int32 if a.dtype == np.int32 else dtype)
            for name, a in _np_tables().items()}


def torsion_angles_to_frames(backbone: Rigid, angles: tf.Tensor, aatype: tf.Tensor,
                             default_frames: tf.Tensor) -> Rigid:
    """The 8 rigid-group frames [*, N, 8] in global coordinates (Algorithm 24).

    Group g's frame = backbone ∘ default_g ∘ Rx(torsion_g), with the χ2–χ4 groups chained
    onto χ1 (each default frame of χ2..χ4 is relative to the previous χ group). The
    backbone group's torsion is the identity (sin 0, cos 1). Rx(α) = [[1,0,0],[0,c,−s],[0,s,c]].
    """
    defaults = Rigid.from_tensor_4x4(tf.gather(default_frames, aatype))  # [*, N, 8]
    ident = tf.zeros_like(angles[..., :1, :]) + tf.constant([0.0, 1.0], dtype=angles.dtype)
    sin, cos = tf.unstack(tf.concat([ident, angles], axis=-2), num=2, axis=-1)  # [*, N, 8]
    zero, one = tf.zeros_like(sin), tf.ones_like(sin)
    rx = tf.stack([tf.stack([one, zero, zero], axis=-1),
                   tf.stack([zero, cos, -sin], axis=-1),
                   tf.stack([zero, sin, cos], axis=-1)], axis=-2)
    local = defaults.compose(Rigid(rx, tf.zeros_like(defaults.trans)))
    chained = [local[..., g] for g in range(5)]
    for g in (5, 6, 7):  # χ2 onto χ1, χ3 onto χ2, χ4 onto χ3
        chained.append(chained[-1].compose(local[..., g]))
    to_backbone = Rigid(tf.stack([f.rot for f in chained], axis=-3),
                        tf.stack([f.trans for f in chained], axis=-2))
    return backbone.unsqueeze(-1).compose(to_backbone)


def _take(x: tf.Tensor, index: tf.Tensor) -> tf.Tensor:
    """Per batch element, the entries `index` [*, K] of `x` [*, M, …] along the dim after
    the batch dims `*`, trailing dims kept: [*, K, …] (torch.gather with an index expanded
    over the trailing dims)."""
    batch = index.shape.rank - 1
    return tf.gather(x, index, axis=batch, batch_dims=batch)


def frames_to_atom14(frames: Rigid, aatype: tf.Tensor,
                     tables: dict[str, tf.Tensor]) -> tf.Tensor:
    """atom14 positions [*, N, 14, 3]: each atom's literature position in its group frame,
    zero where the residue type has no such atom (Algorithm 24, lines 10–11)."""
    group = tf.gather(tables["group_idx"], aatype)  # [*, N, 14]
    rot = _take(frames.rot, group)
    trans = _take(frames.trans, group)
    pos = Rigid(rot, trans).apply(tf.cast(tf.gather(tables["lit_positions"], aatype),
                                          rot.dtype))
    return pos * tf.cast(tf.gather(tables["atom_mask"], aatype), pos.dtype)[..., None]


def atom14_to_atom37(atom14: tf.Tensor, residx_atom37_to_atom14: tf.Tensor,
                     atom37_atom_exists: tf.Tensor) -> tf.Tensor:
    """atom37 positions [*, N, 37, 3] from atom14 through the per-residue index map."""
    idx = tf.cast(residx_atom37_to_atom14, tf.int32)
    return _take(atom14, idx) * tf.cast(atom37_atom_exists, atom14.dtype)[..., None]


def _iteration_seed(seed: tf.Tensor | None, i: tf.Tensor) -> tf.Tensor | None:
    """The dropout seed of structure-module iteration `i` (a tensor: the loop counter)
    under the module's `seed` (int64 [2]; None: no dropout)."""
    if seed is None:
        return None
    return tf.cast(seed, tf.int64) + tf.cast(i, tf.int64) * tf.constant(
        [0, ITERATION_SEED_STRIDE], tf.int64)


def _iterations_second(x: tf.Tensor) -> tf.Tensor:
    """`x` [I, B, …] as [B, I, …]."""
    return tf.transpose(x, [1, 0, *range(2, x.shape.rank)])


class StructureModule(_Built):
    """The structure module (Algorithm 20), built at reference path `path`.

    The ``sm_blocks`` iterations share their weights, so they run as one ``tf.while_loop``
    rather than a Python loop: traced, the graph holds one iteration's ops instead of
    ``sm_blocks`` copies (unrolled, the module was most of a model pass's graph, and
    tracing plus grappler of a training step took minutes). Eagerly the loop simply runs.

    Dropout: one layer each (``ipa_dropout``, ``transition__dropout``; they hold no
    weights). A stateless mask is a function of the seed and the layer's name, so the
    loop body runs under its iteration's own seed (:func:`_iteration_seed`): the masks
    differ between iterations, as the reference's fresh draws do, and are reproducible.
    """

    def __init__(self, spec: ModelSpec, path: str = "structure_module") -> None:
        dtype = full_precision()
        super().__init__(name=path, dtype=dtype)
        self.num_blocks, self.scale = spec.sm_blocks, spec.trans_scale_factor
        self.num_angles = spec.num_angles
        eps, c_s = spec.layer_norm_eps, spec.c_s
        self.layer_norm_s = layer_norm(c_s, child(path, "layer_norm_s"), eps, dtype=dtype)
        self.layer_norm_z = layer_norm(spec.c_z, child(path, "layer_norm_z"), eps,
                                       dtype=dtype)
        self.linear_in = Dense(c_s, c_s, child(path, "linear_in"), dtype=dtype)
        self.ipa = InvariantPointAttention(spec, child(path, "ipa"))
        self.ipa_dropout = _dropout(spec.sm_dropout, child(path, "ipa_dropout"))
        self.layer_norm_ipa = layer_norm(c_s, child(path, "layer_norm_ipa"), eps, dtype=dtype)
        self.transition = SingleTransition(spec, child(path, "transition"))
        self.bb_update = BackboneUpdate(spec, child(path, "bb_update"))
        self.angle_resnet = AngleResnet(spec, child(path, "angle_resnet"))

    def compute_mask(self, inputs: tf.Tensor, previous_mask: tf.Tensor | None = None) -> None:
        """``mask`` is the residue mask, not a Keras mask (see the IPA's)."""
        return None

    def _outputs(self, s: tf.Tensor) -> dict[str, tf.TensorShape]:
        """The static shape of one iteration's output of each key, given s [B, N, c_s]
        (B and N as static as s has them)."""
        b_n = s.shape[:-1].as_list()
        return {"frames": tf.TensorShape([*b_n, 7]),
                "sidechain_frames": tf.TensorShape([*b_n, 8, 4, 4]),
                "unnormalized_angles": tf.TensorShape([*b_n, self.num_angles, 2]),
                "angles": tf.TensorShape([*b_n, self.num_angles, 2]),
                "positions": tf.TensorShape([*b_n, 14, 3]),
                "states": s.shape}

    def call(self, s: tf.Tensor, z: tf.Tensor, mask: tf.Tensor, aatype: tf.Tensor,
             training: bool = False) -> dict[str, tf.Tensor]:
        """s [B, N, c_s], z [B, N, N, c_z], mask [B, N], aatype [B, N]."""
        dtype = self.compute_dtype
        s, z, mask = tf.cast(s, dtype), tf.cast(z, dtype), tf.cast(mask, dtype)
        s = self.layer_norm_s(s)
        z = self.layer_norm_z(z)
        s_initial = s
        s = self.linear_in(s)
        quat = identity_quaternion(tf.shape(s)[:-1], dtype=s.dtype)
        trans = tf.zeros_like(quat[..., 1:])
        tables = _tables(quat.dtype)
        aatype = tf.cast(aatype, tf.int32)
        seed = current_seed()
        shapes = self._outputs(s)
        # Loop invariants: s, quat and trans keep their entry shapes (the loop's default
        # shape invariants; N may be None, so one trace serves every residue count); output
        # key k of iteration i is element i of arrays[k]
        carried = (s, quat, trans)
        arrays = {key: tf.TensorArray(dtype, size=self.num_blocks, element_shape=shape)
                  for key, shape in shapes.items()}

        def body(i: tf.Tensor, s: tf.Tensor, quat: tf.Tensor, trans: tf.Tensor,
                 arrays: dict[str, tf.TensorArray]) -> tuple:
            with dropout_seed(_iteration_seed(seed, i)):
                s = s + self.ipa(s, z, frames=Rigid(quat_to_rot(quat), trans), mask=mask)
                s = self.layer_norm_ipa(self.ipa_dropout(s, training=training))
                s = self.transition(s, training=training)
            quat, trans = compose_quat_update(quat, trans, self.bb_update(s))
            backbone = Rigid(quat_to_rot(quat), trans * self.scale)
            raw, angles = self.angle_resnet(s, s_initial)
            groups = torsion_angles_to_frames(backbone, angles, aatype,
                                              tables["default_frames"])
            step = {"frames": tf.concat([quat, trans * self.scale], axis=-1),
                    "sidechain_frames": groups.to_tensor_4x4(),
                    "unnormalized_angles": raw,
                    "angles": angles,
                    "positions": frames_to_atom14(groups, aatype, tables),
                    "states": s}
            arrays = {key: arrays[key].write(i, value) for key, value in step.items()}
            # the outputs hold the new rotation with its gradient; only the next iteration
            # sees it detached (Algorithm 20, line 20)
            quat = tf.stop_gradient(quat)
            return i + 1, s, quat, trans, arrays

        _, s, _, _, arrays = tf.while_loop(
            lambda i, *_: i < self.num_blocks, body, (tf.constant(0), *carried, arrays),
            maximum_iterations=self.num_blocks)
        # TensorArray.stack puts the iteration first: [I, B, N, …] → [B, I, N, …]
        out = {key: _iterations_second(array.stack()) for key, array in arrays.items()}
        out["single"] = s
        return out

