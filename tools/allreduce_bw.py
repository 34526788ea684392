#!/usr/bin/env python3
"""All-reduce cost between the GPUs of one host, measured through PyTorch's NCCL: the floor
that tensor parallelism's per-layer all-reduces are compared with (docs/parallel.md).

One process per GPU; for each size (bf16 elements = rows x hidden), the median time of
many all-reduces of random data after a warm-up (eager: below ~8 MiB this is PyTorch's
host-side enqueue, ~60-70 us on an H100 pair, not the link; see docs/parallel.md), and the bus bandwidth NCCL's own tests
report (2 (N-1)/N x bytes / time). Prints one line per size and, with --json, writes them.

  python3 tools/allreduce_bw.py [--gpus N] [--hidden 4096] [--json out.json]
"""
import argparse
import json
import os
import statistics

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def worker(rank, world, args, port, queue):
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # never NVLink multicast on a shared host
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    rows_list = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096, 16384]
    results = []
    for rows in rows_list:
        x = torch.randn(rows, args.hidden, device="cuda", dtype=torch.bfloat16)
        for _ in range(20):
            dist.all_reduce(x)
        torch.cuda.synchronize()
        times = []
        for _ in range(args.iters):
            x.normal_()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            dist.all_reduce(x)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1e-3)
        t = statistics.median(times)
        nbytes = x.numel() * 2
        results.append({"rows": rows, "bytes": nbytes, "seconds": t,
                        "bus_bytes_per_s": 2 * (world - 1) / world * nbytes / t})
    if rank == 0:
        queue.put(results)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--gpus", type=int, default=torch.cuda.device_count())
    p.add_argument("--hidden", type=int, default=4096)
    p.add_argument("--iters", type=int, default=200)
    p.add_argument("--json")
    args = p.parse_args()
    if args.gpus < 2:
        print(f"allreduce_bw: {args.gpus} GPU(s) visible, 2 needed")
        return
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = 29500 + os.getpid() % 1000
    mp.spawn(worker, args=(args.gpus, args, port, queue), nprocs=args.gpus, join=True)
    results = queue.get()
    print(f"all-reduce over {args.gpus} GPUs (torch {torch.__version__}, NCCL {torch.cuda.nccl.version()}), "
          f"bf16 rows x {args.hidden}:")
    print(f"{'rows':>6s} {'bytes':>10s} {'median us':>10s} {'bus GB/s':>9s}")
    for r in results:
        print(f"{r['rows']:6d} {r['bytes']:10d} {r['seconds'] * 1e6:10.1f} {r['bus_bytes_per_s'] / 1e9:9.1f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"gpus": args.gpus, "hidden": args.hidden, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
