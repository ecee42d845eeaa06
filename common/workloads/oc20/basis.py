"""DimeNet++'s basis functions in numpy: the reference values both frameworks are tested
against.

As PyG 1.7.2 (which the OC20 reference imports) computes them:

* envelope u(x), x = d / cutoff, p = exponent + 1: 1/x + a·x^(p−1) + b·x^p + c·x^(p+1) with
  a = −(p+1)(p+2)/2, b = p(p+2), c = −p(p+1)/2 — **not** masked at x ≥ 1 (TensorFlow's
  original and newer PyG multiply by (x < 1); they agree while every edge is within the
  cutoff, which the preprocessing guarantees);
* radial basis rbf_n(d) = u(x)·sin(f_n·x), frequencies f_n trainable, initialised nπ (no
  √(2/c) prefactor);
* spherical basis, per triplet with its k→j edge length d_kj and angle θ:
  sbf[l·R + n] = u(x_kj)·N_ln·j_l(z_ln·x_kj)·Y_l^0(θ) — l-major, z_ln the first R roots of
  the spherical Bessel function j_l, N_ln = 1/√(½·j_{l+1}(z_ln)²),
  Y_l^0(θ) = √((2l+1)/4π)·P_l(cos θ). The reference derives j_l symbolically (sympy); the
  closed forms are scipy's ``spherical_jn``, the same functions.
"""

from __future__ import annotations

import functools
import math

import numpy as np
from scipy.optimize import brentq
from scipy.special import spherical_jn


def envelope_coefficients(exponent: int) -> tuple[int, float, float, float]:
    """(p, a, b, c) of the envelope for `exponent` (5 → p = 6, a = −28, b = 48, c = −21)."""
    p = exponent + 1
    return p, -(p + 1) * (p + 2) / 2.0, float(p * (p + 2)), -p * (p + 1) / 2.0


def envelope(x: np.ndarray, exponent: int = 5) -> np.ndarray:
    """u(x) of the reference (unmasked) for scaled distances x = d / cutoff > 0."""
    p, a, b, c = envelope_coefficients(exponent)
    x = np.asarray(x, np.float64)
    return 1.0 / x + a * x ** (p - 1) + b * x**p + c * x ** (p + 1)


def initial_frequencies(num_radial: int) -> np.ndarray:
    """The trainable radial frequencies at initialisation: nπ, n = 1..R."""
    return np.arange(1, num_radial + 1, dtype=np.float64) * math.pi


def radial_basis(d: np.ndarray, cutoff: float, frequencies: np.ndarray,
                 exponent: int = 5) -> np.ndarray:
    """(E, R) radial basis of edge lengths `d` (Å)."""
    x = np.asarray(d, np.float64)[:, None] / cutoff
    return envelope(x, exponent) * np.sin(np.asarray(frequencies, np.float64)[None] * x)


@functools.lru_cache(maxsize=8)
def bessel_roots(num_spherical: int, num_radial: int) -> np.ndarray:
    """(L, R) first R positive roots z_ln of j_l for l < L.

    The roots of j_l interlace with those of j_{l−1}, so each one is bracketed by two
    consecutive roots of the order below, starting from j_0's roots nπ."""
    count = num_radial + num_spherical - 1
    zeros = np.zeros((num_spherical, num_radial))
    points = np.arange(1, count + 1, dtype=np.float64) * math.pi
    zeros[0] = points[:num_radial]
    for order in range(1, num_spherical):
        roots = [brentq(lambda z, n=order: spherical_jn(n, z), points[j], points[j + 1])
                 for j in range(count - order)]
        points = np.asarray(roots)
        zeros[order] = points[:num_radial]
    return zeros


def bessel_normalisers(num_spherical: int, num_radial: int) -> np.ndarray:
    """(L, R) N_ln = 1/√(½·j_{l+1}(z_ln)²)."""
    z = bessel_roots(num_spherical, num_radial)
    orders = np.arange(num_spherical)[:, None] + 1
    return 1.0 / np.sqrt(0.5 * spherical_jn(orders, z) ** 2)


def spherical_harmonics(angle: np.ndarray, num_spherical: int) -> np.ndarray:
    """(T, L) zonal harmonics Y_l^0 = √((2l+1)/4π)·P_l(cos θ)."""
    cos = np.cos(np.asarray(angle, np.float64))
    out = np.empty((cos.size, num_spherical))
    for order in range(num_spherical):
        coef = np.zeros(order + 1)
        coef[order] = 1.0
        out[:, order] = math.sqrt((2 * order + 1) / (4 * math.pi)) * \
            np.polynomial.legendre.legval(cos.ravel(), coef)
    return out


def spherical_basis(d_kj: np.ndarray, angle: np.ndarray, cutoff: float, num_spherical: int,
                    num_radial: int, exponent: int = 5) -> np.ndarray:
    """(T, L·R) spherical basis of triplets, l-major: column l·R + n."""
    x = np.asarray(d_kj, np.float64) / cutoff
    z = bessel_roots(num_spherical, num_radial)
    norm = bessel_normalisers(num_spherical, num_radial)
    orders = np.arange(num_spherical)[None, :, None]
    radial = norm[None] * spherical_jn(orders, z[None] * x[:, None, None])  # (T, L, R)
    radial = envelope(x, exponent)[:, None, None] * radial
    ylm = spherical_harmonics(angle, num_spherical)[:, :, None]  # (T, L, 1)
    return (radial * ylm).reshape(len(x), num_spherical * num_radial)


def triplet_angle(vec_ji: np.ndarray, vec_kj: np.ndarray) -> np.ndarray:
    """atan2(|a×b|, a·b) between a = pos_j − pos_i (+ offset) and b = pos_k − pos_j
    (+ offset): the angle between i→j and j→k, i.e. π − ∠ijk, as the reference."""
    a, b = np.asarray(vec_ji, np.float64), np.asarray(vec_kj, np.float64)
    return np.arctan2(np.linalg.norm(np.cross(a, b), axis=-1), np.sum(a * b, axis=-1))
