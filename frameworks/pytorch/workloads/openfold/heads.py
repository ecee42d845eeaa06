"""The four output heads of ``initial_training`` (AF2 supplement §1.9; no TM-score head):
pLDDT on the structure module's final single, distogram on the pair (symmetrised by
adding the transpose), masked MSA on the clustered MSA rows, experimentally resolved on
the Evoformer's single representation."""

from __future__ import annotations

import torch
from torch import nn

from sciperf.workloads.openfold.sizes import ModelSpec
from sciperf_pytorch.workloads.openfold.primitives import Linear, layer_norm

__all__ = ["AuxiliaryHeads", "expected_plddt"]


class PerResidueLDDTCaPredictor(nn.Module):
    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        self.layer_norm = layer_norm(spec.c_s, spec.layer_norm_eps)
        self.linear_1 = Linear(spec.c_s, spec.plddt_c_hidden, init="relu")
        self.linear_2 = Linear(spec.plddt_c_hidden, spec.plddt_c_hidden, init="relu")
        self.linear_3 = Linear(spec.plddt_c_hidden, spec.plddt_num_bins, init="final")

    def forward(self, s: torch.Tensor) -> torch.Tensor:
        s = torch.relu(self.linear_1(self.layer_norm(s)))
        return self.linear_3(torch.relu(self.linear_2(s)))


class DistogramHead(nn.Module):
    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        self.linear = Linear(spec.c_z, spec.distogram_num_bins, init="final")

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        logits = self.linear(z)
        return logits + logits.transpose(-2, -3)


class _LinearHead(nn.Module):
    def __init__(self, fin: int, fout: int) -> None:
        super().__init__()
        self.linear = Linear(fin, fout, init="final")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x)


def expected_plddt(logits: torch.Tensor) -> torch.Tensor:
    """pLDDT in [0, 100]: the expectation over bin centres (b + ½)/num_bins."""
    bins = logits.shape[-1]
    centres = (torch.arange(bins, device=logits.device, dtype=logits.dtype) + 0.5) / bins
    return (torch.softmax(logits, dim=-1) * centres).sum(dim=-1) * 100


class AuxiliaryHeads(nn.Module):
    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        self.plddt = PerResidueLDDTCaPredictor(spec)
        self.distogram = DistogramHead(spec)
        self.masked_msa = _LinearHead(spec.c_m, spec.msa_classes)
        self.experimentally_resolved = _LinearHead(spec.c_s, spec.num_atom_types)

    def forward(self, sm_single: torch.Tensor, pair: torch.Tensor, msa: torch.Tensor,
                single: torch.Tensor) -> dict[str, torch.Tensor]:
        lddt_logits = self.plddt(sm_single)
        return {"lddt_logits": lddt_logits,
                "plddt": expected_plddt(lddt_logits),
                "distogram_logits": self.distogram(pair),
                "masked_msa_logits": self.masked_msa(msa),
                "experimentally_resolved_logits": self.experimentally_resolved(single)}
