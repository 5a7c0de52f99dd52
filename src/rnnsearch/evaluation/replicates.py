"""Statistics over the replicates of a model (its trainings with seeds `seed`, `seed` + 1, …): mean, sample
standard deviation, and Welch's t-test between two models' replicate scores."""

from __future__ import annotations

import math
from statistics import fmean, stdev


def each_replicate(patterns: list[str], replicates: int) -> list[str]:
    """Files named by patterns with a `{replicate}` field, for replicates 1..N, pattern by pattern (a name without
    the field is taken as it is)."""
    return list(dict.fromkeys(p.replace("{replicate}", str(r)) for p in patterns for r in range(1, replicates + 1)))


def by_model(records: list[dict]) -> dict[str, list[dict]]:
    """Records (score or train_stats JSONs) grouped by their "model", in the order models first appear."""
    groups: dict[str, list[dict]] = {}
    for r in records:
        groups.setdefault(r["model"], []).append(r)
    return groups


def mean_sd(values: list[float]) -> tuple[float, float | None]:
    """Mean and sample standard deviation (n - 1); the deviation is None for one value."""
    return fmean(values), (stdev(values) if len(values) > 1 else None)


def shown(mean: float, sd: float | None, digits: int = 2) -> str:
    """"78.27 ± 1.20", or "78.27" for one replicate."""
    return f"{mean:.{digits}f}" if sd is None else f"{mean:.{digits}f} ± {sd:.{digits}f}"


def welch_p(a: list[float], b: list[float]) -> float:
    """Two-sided p-value of Welch's t-test that the means of `a` and `b` are equal."""
    return welch(a, b)["p"]


def welch(a: list[float], b: list[float]) -> dict:
    """Welch's t-test (unequal variances) of mean(b) − mean(a): t, the Welch-Satterthwaite degrees of freedom
    (None when neither side varies) and the two-sided p-value. Needs two values on each side."""
    if len(a) < 2 or len(b) < 2:
        raise ValueError("Welch's t-test needs at least two values on each side")
    va, vb = stdev(a) ** 2 / len(a), stdev(b) ** 2 / len(b)
    diff = fmean(b) - fmean(a)
    if va + vb == 0:  # no spread: equal means are no evidence of a difference, unequal ones certain
        return {"t": 0.0 if diff == 0 else math.copysign(math.inf, diff), "df": None, "p": float(diff == 0)}
    t = diff / math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    return {"t": t, "df": df, "p": student_t_sf2(t, df)}


def student_t_sf2(t: float, df: float) -> float:
    """P(|T| ≥ |t|) for Student's t with `df` degrees of freedom: I_{df/(df+t²)}(df/2, 1/2)."""
    return _betainc(df / 2, 0.5, df / (df + t * t))


def _betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b), by its continued fraction (modified Lentz;
    Numerical Recipes §6.4), accurate to ~1e-12."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x > (a + 1) / (a + b + 2):  # the fraction converges fast only below this point: use the symmetry
        return 1.0 - _betainc(b, a, 1.0 - x)
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    f = d
    for m in range(1, 300):
        for numerator in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                          -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            f *= c * d
        if abs(c * d - 1.0) < 1e-14:
            break
    return front * f / a
