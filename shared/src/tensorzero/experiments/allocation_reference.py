"""Reference solutions for allocation_tests.rs: the track-and-stop allocation stated as the cone
program TensorZero solves (Clarabel), for the cases the Rust tests compare against.

Run with a Python that has `clarabel` and `scipy`: python allocation_reference.py
"""

import math

import clarabel
import numpy as np
from scipy import sparse

CASES = [
    # (means (maximised), variances, counts, epsilon, min_prob)
    ([0.8, 0.5], [0.16, 0.25], [40, 40], 0.0, 0.0),
    ([0.8, 0.5, 0.45], [0.16, 0.25, 0.2475], [30, 30, 30], 0.0, 0.0),
    ([0.6, 0.55, 0.3], [0.24, 0.2475, 0.21], [100, 80, 60], 0.0, 0.0),
    ([0.6, 0.55, 0.3], [0.24, 0.2475, 0.21], [100, 80, 60], 0.05, 0.1),
    ([2.0, 1.0, 1.5, 0.5], [1.0, 4.0, 0.5, 2.0], [20, 20, 20, 20], 0.0, 0.05),
    ([0.3, 0.9], [0.21, 0.09], [500, 500], 0.01, 0.0),
]


def leader(means, variances, counts):
    best = max(means)
    tied = [i for i, m in enumerate(means) if abs(m - best) < 1e-10]
    return min(tied, key=lambda i: (variances[i] / max(counts[i], 1), i))


def solve(means, variances, counts, epsilon, min_prob):
    k = len(means)
    n = 2 * k + 1
    floor = max(min_prob, 1e-6)
    alpha = 0.01 / math.sqrt(sum(counts))
    lead = leader(means, variances, counts)
    gap2 = [max((means[lead] - m + epsilon) ** 2, 1e-6) for m in means]
    q = np.zeros(n)
    q[2 * k] = 1.0
    q[:k] = -2.0 * alpha / k
    p = sparse.diags([2.0 * alpha] * k + [0.0] * (k + 1), format="csc")
    rows, b, cones = [], [], []
    row = np.zeros(n)
    row[:k] = 1.0
    rows.append(row)
    b.append(1.0)
    cones.append(clarabel.ZeroConeT(1))
    row = np.zeros(n)
    row[2 * k] = -1.0
    rows.append(row)
    b.append(0.0)
    for i in range(k):
        row = np.zeros(n)
        row[i] = -1.0
        rows.append(row)
        b.append(-floor)
    for i in range(k):
        if i == lead:
            continue
        row = np.zeros(n)
        row[k + i] = 1.0
        row[k + lead] = 1.0
        row[2 * k] = -0.5 * gap2[i]
        rows.append(row)
        b.append(0.0)
    cones.append(clarabel.NonnegativeConeT(2 * k))
    for i in range(k):
        first = np.zeros(n)
        first[i] = -1.0
        first[k + i] = -0.5
        second = np.zeros(n)
        second[i] = -1.0
        second[k + i] = 0.5
        rows += [first, second, np.zeros(n)]
        b += [0.0, 0.0, math.sqrt(2.0 * variances[i])]
        cones.append(clarabel.SecondOrderConeT(3))
    settings = clarabel.DefaultSettings()
    settings.verbose = False
    solver = clarabel.DefaultSolver(p, q, sparse.csc_matrix(np.array(rows)), np.array(b), cones, settings)
    solution = solver.solve()
    return list(solution.x[:k])


if __name__ == "__main__":
    for case in CASES:
        print(case, [round(x, 6) for x in solve(*case)])
