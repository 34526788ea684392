#!/usr/bin/env python3
"""Sums kernel durations from `ncu --csv --metrics gpu__time_duration.sum` output.

Prints, per kernel name (templates cut), the launch count, total and mean microseconds and
the share of the profiled time, longest total first; --per N divides totals by N (the
number of steps the profiled launches cover) to give microseconds per step.
"""
import argparse
import csv
import re
import sys
from collections import defaultdict


def short_name(name):
    name = name.replace("(anonymous namespace)::", "").replace("<unnamed>::", "")
    name = re.sub(r"^void ", "", name)
    name = re.sub(r"<.*", "", name)  # template arguments
    name = re.sub(r"\(.*", "", name)  # parameter lists
    return name.split("::")[-1][:60]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv_file")
    ap.add_argument("--per", type=float, default=1.0, help="divide totals by this many steps")
    args = ap.parse_args()
    lines = open(args.csv_file, errors="replace").read().splitlines()
    start = next((i for i, l in enumerate(lines) if l.startswith('"ID"')), None)
    if start is None:
        sys.exit(f"{args.csv_file}: no ncu CSV header found")
    total = defaultdict(float)
    count = defaultdict(int)
    for row in csv.DictReader(lines[start:]):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        value = float(row["Metric Value"].replace(",", ""))
        unit = row.get("Metric Unit", "ns")
        scale = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}.get(unit, 1e-3)
        k = short_name(row["Kernel Name"])
        total[k] += value * scale
        count[k] += 1
    grand = sum(total.values())
    print(f"{'kernel':60s} {'launches':>9s} {'us/step':>10s} {'mean us':>9s} {'share':>7s}")
    for k in sorted(total, key=total.get, reverse=True):
        print(f"{k:60s} {count[k] / args.per:9.1f} {total[k] / args.per:10.1f} "
              f"{total[k] / count[k]:9.2f} {100 * total[k] / grand:6.1f}%")
    print(f"{'all':60s} {sum(count.values()) / args.per:9.1f} {grand / args.per:10.1f}")


if __name__ == "__main__":
    main()
