"""The Gaussian-process surrogate of mCAP-BO's tuned settings (numpy + scipy only).

A zero-mean GP on standardised observations with an isotropic Matern-5/2 kernel (the
kernel ``gp_minimize`` defaults to) over points scaled to [0, 1]: a stage's (first, last)
layer, or a partitioning's cut points (``bayes``). Its length scale and noise are
not fitted by L-BFGS as in scikit-optimize but picked from a fixed grid by the log
marginal likelihood, rounded: a gradient optimiser's path, and so its answer, moves with
the last bits of exp/BLAS, which differ between CPUs (AVX2/FMA vs AVX-512 kernels), while a
rounded grid argmax does not. ``expected_improvement`` is the usual EI for minimisation.
"""
from __future__ import annotations

import math

import numpy as np
from scipy.linalg import cho_solve, solve_triangular
from scipy.special import ndtr

LENGTH_SCALES = (0.05, 0.1, 0.2, 0.4)
NOISES = (1e-6, 1e-2)  # variance of the standardised objective


def _matern52(A: np.ndarray, B: np.ndarray, ls: float) -> np.ndarray:
    d2 = (A * A).sum(1)[:, None] + (B * B).sum(1)[None, :] - 2.0 * (A @ B.T)
    r = np.sqrt(5.0 * np.maximum(d2, 0.0)) / ls
    return (1.0 + r + r * r / 3.0) * np.exp(-r)


def posterior(X: np.ndarray, y: np.ndarray, C: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and standard deviation (in y's units) at candidates C given observations (X, y)."""
    mu = float(y.mean())
    sd = float(y.std()) or 1.0
    z = (y - mu) / sd
    n = len(z)
    best = None
    for ls in LENGTH_SCALES:
        K = _matern52(X, X, ls)
        for noise in NOISES:
            Lc = np.linalg.cholesky(K + noise * np.eye(n))
            alpha = cho_solve((Lc, True), z)
            lml = -0.5 * float(z @ alpha) - float(np.log(np.diag(Lc)).sum()) - 0.5 * n * math.log(2 * math.pi)
            score = round(lml, 6)  # rounded: equal within noise means equal on every machine
            if best is None or score > best[0]:
                best = (score, ls, Lc, alpha)
    _, ls, Lc, alpha = best
    Ks = _matern52(C, X, ls)
    mean = Ks @ alpha
    V = solve_triangular(Lc, Ks.T, lower=True)
    std = np.sqrt(np.maximum(1.0 - (V * V).sum(0), 1e-12))
    return mu + sd * mean, sd * std


def expected_improvement(mean: np.ndarray, std: np.ndarray, best: float, xi: float) -> np.ndarray:
    imp = best - mean - xi
    u = imp / std
    return imp * ndtr(u) + std * np.exp(-0.5 * u * u) / math.sqrt(2 * math.pi)


def pick(scores: np.ndarray) -> int:
    """Index of the highest score after rounding to 9 significant digits of the largest: scores
    that differ only in the last bits tie exactly and the first one wins, on any machine."""
    scores = np.where(np.isfinite(scores), scores, -np.inf)
    finite = scores[np.isfinite(scores)]
    if not finite.size:
        return 0
    top = float(np.max(np.abs(finite))) or 1.0
    return int(np.argmax(np.round(scores / top, 9)))
