#!/usr/bin/env python3
"""Writes tests/train/fixtures/scalars.tfevents with TensorBoard's own event file writer.

The C++ writer (src/train/tensorboard_writer.cpp) encodes the TFRecord framing and the few protobuf
fields of an Event by hand; tests/train/test_tensorboard.cpp writes the same scalars with the same wall
times and steps and checks that its file is byte for byte this one, so TensorBoard reads ours as its
own. The scalars cover what the encoding must get right: a step of 0 (the field is omitted), steps
needing several varint bytes, a value of 0 (simple_value is in a oneof and is written anyway), a
value that rounds to float32, a negative and a NaN value, and a tag longer than 127 bytes (a two-byte
length). The list is repeated in the C++ test (TensorBoardFixture.*).

Needs only `pip install tensorboard` (no torch, no TensorFlow).
Usage: python3 tools/reference/make_tensorboard_fixture.py [output path]
"""
import os
import sys
import tempfile
import time
from unittest import mock

from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.summary.writer.event_file_writer import EventFileWriter

START_TIME = 1700000000.0  # wall time of the file-version event
LONG_TAG = "moe/load_balancing_loss_" + "x" * 120

# (wall_time, step, tag, value)
SCALARS = [
    (1700000001.25, 1, "lm loss", 10.5),
    (1700000001.25, 4, "lm loss vs samples", 10.5),
    (1700000002.0, 2, "learning-rate", 3e-4),
    (1700000002.5, 300, "grad-norm", 0.0),
    (1700000003.0, 0, "batch-size", 4.0),
    (1700000003.75, 1 << 40, "lm loss validation ppl", -1.5e30),
    (1700000004.1, 7, "z_loss", float("nan")),
    (1700000005.0, 123456789, LONG_TAG, 0.1),
]


def main() -> None:
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "tests", "train", "fixtures",
                                                             "scalars.tfevents")
    with tempfile.TemporaryDirectory() as tmp:
        # The writer stamps its file-version event with time.time(): fixed here.
        with mock.patch.object(time, "time", return_value=START_TIME):
            writer = EventFileWriter(tmp)
        for wall_time, step, tag, value in SCALARS:
            summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, simple_value=value)])
            writer.add_event(event_pb2.Event(wall_time=wall_time, step=step, summary=summary))
        writer.close()
        (name,) = os.listdir(tmp)
        with open(os.path.join(tmp, name), "rb") as f:
            data = f.read()
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "wb") as f:
        f.write(data)
    print(f"wrote {out} ({len(data)} bytes), written by TensorBoard's EventFileWriter as {name}")
    for wall_time, step, tag, value in SCALARS:
        print(f"{wall_time!r} {step} {tag!r} {value!r}")


if __name__ == "__main__":
    main()
