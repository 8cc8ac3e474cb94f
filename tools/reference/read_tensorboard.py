#!/usr/bin/env python3
"""Lists the scalars of a TensorBoard log directory with TensorBoard's own reader, and checks tags.

Reads every event file under LOGDIR with tensorboard.backend.event_processing.event_accumulator
(what TensorBoard's scalar dashboard is built on), prints one line per scalar tag (how many points,
the steps, the last value), and exits 1 when a tag given with --require is missing: the check that
pretrain_difflm's --tensorboard-dir files are readable as TensorBoard's own (scripts/tensorboard_check.sh).

Needs only `pip install tensorboard`.
Usage: python3 tools/reference/read_tensorboard.py LOGDIR [--require TAG ...]
"""
import argparse
import sys

from tensorboard.backend.event_processing import event_accumulator


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("logdir")
    parser.add_argument("--require", nargs="*", default=[], metavar="TAG", help="tags that must be present")
    args = parser.parse_args()
    acc = event_accumulator.EventAccumulator(args.logdir, size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    tags = sorted(acc.Tags()["scalars"])
    print(f"{args.logdir}: {len(tags)} scalar tags")
    for tag in tags:
        events = acc.Scalars(tag)
        steps = [e.step for e in events]
        print(f"  {tag!r:40} {len(events):3d} points, steps {steps}, last {events[-1].value:.6g}")
    missing = [t for t in args.require if t not in tags]
    if missing:
        print(f"missing tags: {missing}", file=sys.stderr)
        return 1
    print(f"all {len(args.require)} required tags present")
    return 0


if __name__ == "__main__":
    sys.exit(main())
