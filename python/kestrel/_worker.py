"""A tensor-parallel rank the engine started (EngineConfig.tp_worker_command): it joins the
group in its environment, loads its shard of the model and runs rank 0's steps until rank 0
ends. Not for users: `python -m kestrel._worker --kestrel-tp-worker`."""
import sys

from . import _kestrel


def main() -> int:
    rc = _kestrel.run_worker_if_spawned(["kestrel-worker"] + sys.argv[1:])
    if rc is None:
        print("kestrel._worker: not started by a kestrel engine", file=sys.stderr)
        return 2
    return rc


if __name__ == "__main__":
    sys.exit(main())
