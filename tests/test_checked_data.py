"""Checked data: real stores and checkpoints on disk, really damaged (a chunk file deleted, truncated,
a byte flipped, two chunk files swapped), a save killed by SIGKILL midway; every damage is a
DataLossError naming where it is and what to do, and checkpoint directories clean up after
themselves."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import zarr

import dflow as tf
from dflow import checked_arrays
from dflow.bench.checked_reads import unchecked_copy
from dflow.data import Dataset, describe, open_store
from dflow.data.store import DatasetSource, SplitSource, write_store
from dflow.errors import DataLossError

CHUNK = 25
ZERO_CHUNK = 2  # its images are all black: stored all the same


def _source() -> DatasetSource:
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (400, 8, 8, 1), dtype=np.uint8)
    images[ZERO_CHUNK * CHUNK:(ZERO_CHUNK + 1) * CHUNK] = 0
    labels = rng.integers(0, 10, 400)
    split = SplitSource("train", 400, (8, 8, 1), lambda a, b: (images[a:b], labels[a:b]))
    return DatasetSource("checked", [str(k) for k in range(10)], [split], [{"name": "generated"}])


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> str:
    """400 examples of 8x8x1 in 16 chunks of 25; chunk 2's images are all zero."""
    return write_store(_source(), str(tmp_path_factory.mktemp("data") / "s.zarr"), chunk_examples=CHUNK,
                       echo=None)


@pytest.fixture
def copy(store, tmp_path) -> str:
    return shutil.copytree(store, str(tmp_path / "copy.zarr"))


def _chunk_file(store: str, array: str, index: int) -> str:
    trailing = ["0", "0", "0"] if array == "images" else []
    return os.path.join(store, "train", array, "c", str(index), *trailing)


def _damage(file: str, how: str, other: str | None = None) -> None:
    if how == "delete":
        os.remove(file)
    elif how == "truncate":
        with open(file, "r+b") as f:
            f.truncate(os.path.getsize(file) // 2)
    elif how == "flip":
        with open(file, "r+b") as f:
            f.seek(os.path.getsize(file) // 2)
            byte = f.read(1)
            f.seek(-1, os.SEEK_CUR)
            f.write(bytes([byte[0] ^ 0x01]))
    else:  # swap
        os.replace(file, file + ".swapping")
        os.replace(other, file)
        os.replace(file + ".swapping", other)


def _read_epoch(store: str) -> int:
    with Dataset(store, "train", 50, shuffle=False, num_epochs=1, prefetch=0) as data:
        return sum(len(labels) for _, labels in data)


PROBLEMS = {"delete": "is missing", "truncate": "is corrupt: its bytes do not match their CRC-32C",
            "flip": "is corrupt: its bytes do not match their CRC-32C",
            "swap": "is corrupt: it holds other data than was written there"}


def test_every_chunk_is_stored_with_its_checksum_and_digest(store):
    root = open_store(store)
    for array in ("images", "labels"):
        meta = json.load(open(os.path.join(store, "train", array, "zarr.json")))
        assert [c["name"] for c in meta["codecs"]] == ["bytes", "zstd", "crc32c"]
        assert len(meta["attributes"]["dflow_chunk_crc32c"]) == 16
        assert all(os.path.exists(_chunk_file(store, array, i)) for i in range(16))  # all-zero one too
    assert not root["train/images"][ZERO_CHUNK * CHUNK:(ZERO_CHUNK + 1) * CHUNK].any()
    assert _read_epoch(store) == 400
    assert "chunks checked: CRC-32C codec and per-chunk digests" in describe(store)


@pytest.mark.parametrize("array", ["images", "labels"])
@pytest.mark.parametrize("how", ["delete", "truncate", "flip", "swap"])
def test_a_damaged_chunk_names_store_array_chunk_and_what_to_do(copy, array, how):
    _damage(_chunk_file(copy, array, 5), how, other=_chunk_file(copy, array, 9))
    file = f"train/{array}/c/5" + ("/0/0/0" if array == "images" else "")
    expected = (rf"chunk 5 of array train/{array} in {re.escape(copy)} \(file {file}\) {PROBLEMS[how]}"
                r".*; prepare the store again with `dflow data prepare`")
    with pytest.raises(DataLossError, match=expected):
        _read_epoch(copy)


def test_a_missing_all_zero_chunk_is_missing_not_black(copy):
    _damage(_chunk_file(copy, "images", ZERO_CHUNK), "delete")
    with pytest.raises(DataLossError, match=rf"chunk {ZERO_CHUNK} of array train/images .* is missing"):
        _read_epoch(copy)


def test_images_and_labels_of_different_lengths_are_refused_at_opening(copy):
    meta_file = os.path.join(copy, "train", "images", "zarr.json")
    meta = json.load(open(meta_file))
    meta["shape"][0] = 375  # an images array cut short by a chunk
    json.dump(meta, open(meta_file, "w"))
    with pytest.raises(DataLossError, match=r"split train has 375 images in chunks of 25 but 400 labels "
                                            r"in chunks of 25 \(its count is 400\); prepare the store again"):
        Dataset(copy, "train", 50)


def test_a_store_without_checksums_reads_with_one_warning(store, tmp_path, caplog):
    old = unchecked_copy(store, str(tmp_path / "old.zarr"))
    assert not os.path.exists(_chunk_file(old, "images", ZERO_CHUNK))  # the old way: holes
    with caplog.at_level(logging.WARNING, logger="dflow"):
        assert _read_epoch(old) == 400
        assert _read_epoch(old) == 400
    warnings = [r.getMessage() for r in caplog.records if "no chunk checksums" in r.getMessage()]
    assert len(warnings) == 1 and "\n" not in warnings[0] and "dflow data prepare" in warnings[0]
    assert "chunks unchecked" in describe(old)


# ---- checkpoints --------------------------------------------------------------------------------
def _model():
    w = tf.Variable(np.arange(12, dtype=np.float32).reshape(3, 4), name="w")
    v = tf.Variable(np.arange(12, 24, dtype=np.float32).reshape(3, 4), name="layer/v")
    z = tf.Variable(np.zeros(5, np.float32), name="z")  # all zeros: stored all the same
    return w, v, z


def _save_steps(directory, steps, max_to_keep=5, prefix="model") -> list[str]:
    with tf.Graph().as_default():
        _model()
        saver = tf.train.Saver(max_to_keep=max_to_keep)
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            return [saver.save(sess, os.path.join(directory, prefix), global_step=s) for s in steps]


def _restore(path):
    with tf.Graph().as_default():
        w, v, z = _model()
        with tf.Session() as sess:
            tf.train.Saver().restore(sess, path)
            return sess.run([w, v, z])


def test_a_checkpoint_stores_every_chunk_with_its_checksum_and_a_marker_last(tmp_path):
    path = _save_steps(str(tmp_path), [1])[0]
    meta = json.load(open(os.path.join(path, "z", "zarr.json")))
    assert [c["name"] for c in meta["codecs"]] == ["bytes", "zstd", "crc32c"]
    assert os.path.exists(os.path.join(path, "z", "c", "0"))
    marker = json.load(open(os.path.join(path, "dflow_checkpoint.json")))
    assert marker["global_step"] == 1 and marker["chunk_files"]["layer%2Fv"] == {
        "c/0/0": os.path.getsize(os.path.join(path, "layer%2Fv", "c", "0", "0"))}
    assert np.array_equal(_restore(path)[1], np.arange(12, 24).reshape(3, 4))


@pytest.mark.parametrize("how", ["delete", "truncate", "flip", "swap"])
def test_a_damaged_checkpoint_is_refused_and_passed_over(tmp_path, how, caplog):
    older, latest = _save_steps(str(tmp_path), [1, 2])
    file = os.path.join(latest, "w", "c", "0", "0")
    _damage(file, how, other=os.path.join(latest, "layer%2Fv", "c", "0", "0"))
    with pytest.raises(DataLossError) as damage:
        _restore(latest)
    message = str(damage.value)
    assert re.match(r"chunk (0|file w/c/0/0) of variable w in checkpoint " + re.escape(latest), message)
    assert "w/c/0/0" in message and f"restore an older checkpoint of {tmp_path}" in message
    with caplog.at_level(logging.WARNING, logger="dflow"):
        assert tf.train.latest_checkpoint(str(tmp_path)) == older
    assert any(f"checkpoint {latest} passed over" in r.getMessage() for r in caplog.records)
    assert tf.train.checkpoint_exists(latest) == (how in ("flip", "swap"))  # contents: read to know
    assert _restore(older)[0][2, 3] == 11


def test_a_missing_all_zero_chunk_fails_the_restore_instead_of_zeros(tmp_path):
    path = _save_steps(str(tmp_path), [1])[0]
    os.remove(os.path.join(path, "z", "c", "0"))
    os.remove(os.path.join(path, "dflow_checkpoint.json"))  # and what would have told from its size
    assert tf.train.latest_checkpoint(str(tmp_path)) is None
    with pytest.raises(tf.errors.NotFoundError, match="no dflow_checkpoint.json"):
        _restore(path)


def test_a_checkpoint_without_checksums_restores_with_a_warning(tmp_path, caplog):
    old = tmp_path / "model-3"
    root = zarr.open_group(str(old), mode="w")
    root.create_array("w", shape=(3, 4), dtype="float32")[...] = 7.0
    root.create_array("layer%2Fv", shape=(3, 4), dtype="float32")[...] = 8.0
    root.create_array("z", shape=(5,), dtype="float32")  # never written: the old way's hole
    root.attrs.update({"dflow_checkpoint": 1, "global_step": 3,
                       "variables": {"w": "w", "layer/v": "layer%2Fv", "z": "z"}})
    (tmp_path / "checkpoint").write_text(json.dumps({"model_checkpoint_path": "model-3",
                                                     "all_model_checkpoint_paths": ["model-3"]}))
    with caplog.at_level(logging.WARNING, logger="dflow"):
        assert tf.train.latest_checkpoint(str(tmp_path)) == str(old)
        w, v, z = _restore(str(old))
    assert w[0, 0] == 7.0 and v[0, 0] == 8.0 and not z.any()
    assert sum("has no chunk checksums" in r.getMessage() for r in caplog.records) == 1


def test_max_to_keep_counts_the_checkpoints_already_in_the_directory(tmp_path):
    directory = str(tmp_path)
    first_run = _save_steps(directory, [1, 2, 3, 4])
    os.remove(os.path.join(directory, "checkpoint"))  # a run that lost track of model-1..4
    second_run = _save_steps(directory, [5, 6])
    _save_steps(directory, [6], prefix="best")  # another saver's: never this one's to remove
    third_run = _save_steps(directory, [7], max_to_keep=2)  # a rerun that keeps 2 in all
    assert sorted(os.listdir(directory)) == ["best-6", "best-6.meta", "checkpoint", "model-6", "model-6.meta",
                                             "model-7", "model-7.meta"]  # (and each one's meta graph)
    state = tf.train.get_checkpoint_state(directory)
    assert state.all_model_checkpoint_paths == [second_run[1], third_run[0]]
    assert tf.train.latest_checkpoint(directory) == third_run[0]
    assert not any(map(os.path.exists, first_run))


def test_leftovers_of_dead_writers_are_removed_at_the_next_save(tmp_path, caplog):
    host = re.sub(r"[^\w.-]", "_", __import__("socket").gethostname())
    finished = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                              capture_output=True, text=True, check=True)
    dead = int(finished.stdout)
    names = {f"model-8.tmp-{dead}@{host}-0123abcd": False,  # its writer is gone
             f"model-9.tmp-{os.getppid()}@{host}-0123abcd": True,  # its writer is alive
             "model-3.tmp-deadbeef": False,  # an older dflow's temp name
             "model-2.tmp-deleted-0badf00d": False,  # a removal cut short
             f"checkpoint.tmp-{dead}@{host}-00ff00ff": False}
    for name in names:
        os.makedirs(tmp_path / name / "w" / "c") if "checkpoint" not in name else (tmp_path / name).touch()
    with caplog.at_level(logging.WARNING, logger="dflow"):
        _save_steps(str(tmp_path), [10])
    assert sorted(os.listdir(tmp_path)) == sorted(["checkpoint", "model-10", "model-10.meta"] +
                                                  [n for n, alive in names.items() if alive])
    assert any("removed 4 leftovers of interrupted saves" in r.getMessage() for r in caplog.records)


_KILLED_SAVE = """
import os, sys, threading
import numpy as np
import dflow as tf
from dflow.train import saver as saver_module

directory, stop_in, signal_file = sys.argv[1:]
tf.Variable(np.arange(200_000, dtype=np.float32), name="w")
tf.Variable(np.ones(10, np.float32), name="b")
saver = tf.train.Saver()
with tf.Session() as sess:
    sess.run(tf.global_variables_initializer())
    saver.save(sess, os.path.join(directory, "model"), global_step=1)
    real = getattr(saver_module, stop_in)

    def stop_midway(*args, **kwargs):
        if stop_in == "write_checked_group":  # one variable written of two
            path, arrays, attributes = args
            real(path, dict(list(arrays.items())[:1]), attributes)
        open(signal_file, "w").close()
        threading.Event().wait()  # until SIGKILL

    setattr(saver_module, stop_in, stop_midway)
    saver.save(sess, os.path.join(directory, "model"), global_step=2)
"""


def _wait_for(path: str, process: subprocess.Popen, deadline_s: float = 120.0) -> None:
    deadline = time.monotonic() + deadline_s
    while not os.path.exists(path):
        try:
            process.wait(timeout=0.05)
        except subprocess.TimeoutExpired:
            pass
        else:
            raise AssertionError(f"the saving process exited {process.returncode}: "
                                 f"{process.stderr.read().decode()[-2000:]}")
        assert time.monotonic() < deadline, "the save never reached the point to kill it at"


@pytest.mark.parametrize("stop_in", ["write_checked_group", "_replace_directory"])
def test_a_save_killed_midway_is_never_chosen_and_is_removed_next_time(tmp_path, stop_in):
    directory, signal_file = tmp_path / "ckpt", str(tmp_path / "midway")
    directory.mkdir()
    env = {**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(tf.__file__))}
    process = subprocess.Popen([sys.executable, "-c", _KILLED_SAVE, str(directory), stop_in, signal_file],
                               env=env, stderr=subprocess.PIPE)
    try:
        _wait_for(signal_file, process)
        process.send_signal(signal.SIGKILL)
        assert process.wait(timeout=60) == -signal.SIGKILL
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        process.stderr.close()
    leftovers = [n for n in os.listdir(directory) if ".tmp-" in n]
    assert len(leftovers) == 1 and leftovers[0].startswith(f"model-2.tmp-{process.pid}@")
    complete = os.path.exists(directory / leftovers[0] / "dflow_checkpoint.json")
    assert complete == (stop_in == "_replace_directory")  # whole but unpublished: still not chosen
    assert tf.train.latest_checkpoint(str(directory)) == str(directory / "model-1")
    assert not tf.train.checkpoint_exists(str(directory / leftovers[0]))
    with tf.Graph().as_default():
        w = tf.Variable(np.zeros(200_000, np.float32), name="w")
        tf.Variable(np.zeros(10, np.float32), name="b")
        saver = tf.train.Saver()
        with tf.Session() as sess:
            saver.restore(sess, tf.train.latest_checkpoint(str(directory)))
            assert sess.run(w)[-1] == 199_999
            saver.save(sess, str(directory / "model"), global_step=3)
    assert sorted(os.listdir(directory)) == ["checkpoint", "model-1", "model-1.meta", "model-3",
                                             "model-3.meta"]


def test_ctrl_c_during_a_save_ends_its_writes_before_the_clean_up(tmp_path, monkeypatch):
    """Ctrl-C while a save's arrays are written (on zarr's event loop): the writes end before the
    interrupt reaches the saver, whose clean-up then removes the unfinished checkpoint whole.
    zarr's own wait raised at once and left them writing into the directory being removed."""
    digests, interrupted = checked_arrays.chunk_digests, []

    def interrupt_once_then_digest(value, chunks):  # on zarr's loop, before each array's writes
        if not interrupted:
            interrupted.append(True)
            signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
        return digests(value, chunks)

    monkeypatch.setattr(checked_arrays, "chunk_digests", interrupt_once_then_digest)
    with tf.Graph().as_default():
        for i in range(8):
            tf.Variable(np.full(1 << 20, i, np.float32), name=f"w{i}")
        saver = tf.train.Saver()
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            with pytest.raises(KeyboardInterrupt):
                saver.save(sess, str(tmp_path / "model"), global_step=1)
            _zarr_tasks_ended()  # had the save left any writing, the temp checkpoint would be back
            assert interrupted and os.listdir(tmp_path) == []
            saver.save(sess, str(tmp_path / "model"), global_step=2)  # and the next save is whole
            assert tf.train.latest_checkpoint(str(tmp_path)) == str(tmp_path / "model-2")


def _zarr_tasks_ended() -> None:
    """Returns when every task on zarr's event loop has ended (or after a minute)."""
    from zarr.core.sync import sync

    async def the_others_ended():
        others = asyncio.all_tasks() - {asyncio.current_task()}
        if others:
            await asyncio.wait(others, timeout=60)

    sync(the_others_ended())


def test_dflow_data_verify_names_every_damaged_chunk(copy, capsys):
    from dflow.cli import main

    assert main(["data", "verify", copy]) == 0
    assert f"{copy}: 32 chunks read back as written" in capsys.readouterr().out
    _damage(_chunk_file(copy, "images", 3), "swap", other=_chunk_file(copy, "images", 4))
    _damage(_chunk_file(copy, "labels", 15), "truncate")
    assert main(["data", "verify", copy]) == 1
    lines = capsys.readouterr().err.splitlines()
    assert [re.search(r"chunk (\d+) of array (\S+)", line).groups() for line in lines[:-1]] == [
        ("3", "train/images"), ("4", "train/images"), ("15", "train/labels")]
    assert lines[-1] == f"{copy}: 3 of 32 chunks damaged"
@pytest.mark.parametrize("how, chunk, problem", [
    ("swap", 0, "it holds other data than was written there"),  # same-size files: only the digest knows
    ("flip", 2, "its bytes do not match their CRC-32C"),
])
def test_damage_inside_a_variable_of_many_chunks_names_the_chunk(tmp_path, monkeypatch, how, chunk, problem):
    # a checkpoint's chunks are of 64 MiB: here of 256 KiB, 4 chunks of 128 x 512
    monkeypatch.setattr(checked_arrays, "_GROUP_CHUNK_BYTES", 256 << 10)
    value = np.repeat(np.float32([1, 2, 3, 4]), 128)[:, None] * np.ones((1, 512), np.float32)
    with tf.Graph().as_default():
        tf.Variable(value, name="big")
        saver = tf.train.Saver()
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            path = saver.save(sess, str(tmp_path / "model"), global_step=1)
            files = {index: os.path.join(path, "big", "c", str(index), "0") for index in range(4)}
            assert os.path.getsize(files[0]) == os.path.getsize(files[3])
            _damage(files[chunk], how, other=files[3])
            coords = "/".join(files[chunk].split(os.sep)[-2:])
            with pytest.raises(DataLossError, match=rf"chunk {chunk} of variable big in checkpoint "
                                                    rf"{re.escape(path)} \(file big/c/{coords}\) is corrupt: "
                                                    rf"{problem}"):
                saver.restore(sess, path)
    assert tf.train.latest_checkpoint(str(tmp_path)) is None  # the only one: nothing to fall back on
