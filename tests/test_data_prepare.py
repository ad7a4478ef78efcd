"""Preparing stores from each dataset's original format, written here in miniature."""

from __future__ import annotations

import gzip
import io
import os
import pickle
import shutil
import tarfile

import numpy as np
import pytest

from dflow.data import SourceError, open_store, prepare
from dflow.data.store import write_store

CIFAR_NAMES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]


def _pickled(obj, protocol=2) -> bytes:
    return pickle.dumps(obj, protocol=protocol)


def _cifar_batch(rng, n: int, name: bytes) -> tuple[dict, np.ndarray, np.ndarray]:
    """A batch as the CIFAR-10 python archive pickles it: bytes keys, rows of R, G, B planes."""
    images = rng.integers(0, 256, (n, 32, 32, 3), dtype=np.uint8)
    labels = rng.integers(0, 10, n)
    batch = {b"batch_label": name, b"labels": [int(v) for v in labels],
             b"data": images.transpose(0, 3, 1, 2).reshape(n, 3072),
             b"filenames": [b"img_%d.png" % i for i in range(n)]}
    return batch, images, labels


def write_cifar_tarball(path, per_batch: int = 12, members=None, seed: int = 0) -> dict:
    """A cifar-10-python.tar.gz with the real layout; returns the images and labels per split."""
    rng = np.random.default_rng(seed)
    contents, train = {}, []
    for i in range(1, 6):
        batch, images, labels = _cifar_batch(rng, per_batch, b"training batch %d of 5" % i)
        contents[f"data_batch_{i}"] = _pickled(batch)
        train.append((images, labels))
    batch, test_images, test_labels = _cifar_batch(rng, per_batch, b"testing batch 1 of 1")
    contents["test_batch"] = _pickled(batch)
    contents["batches.meta"] = _pickled({b"label_names": [n.encode() for n in CIFAR_NAMES],
                                         b"num_cases_per_batch": per_batch, b"num_vis": 3072})
    contents.update(members or {})
    with tarfile.open(path, "w:gz") as archive:
        for name, data in contents.items():
            if data is None:
                continue
            info = tarfile.TarInfo(f"cifar-10-batches-py/{name}")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return {"train": (np.concatenate([t[0] for t in train]), np.concatenate([t[1] for t in train])),
            "test": (test_images, test_labels)}


def _idx(array: np.ndarray) -> bytes:
    header = bytes([0, 0, 8, array.ndim]) + b"".join(int(d).to_bytes(4, "big") for d in array.shape)
    return header + array.astype(np.uint8).tobytes()


def write_mnist(directory, gz: bool = True, n_train: int = 30, n_test: int = 10, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    expected = {}
    os.makedirs(directory, exist_ok=True)
    for split, prefix, n in (("train", "train", n_train), ("test", "t10k", n_test)):
        images = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
        labels = rng.integers(0, 10, n).astype(np.uint8)
        for kind, array, dims in (("images", images, 3), ("labels", labels, 1)):
            name = os.path.join(directory, f"{prefix}-{kind}-idx{dims}-ubyte")
            with (gzip.open(name + ".gz", "wb") if gz else open(name, "wb")) as f:
                f.write(_idx(array))
        expected[split] = (images[..., None], labels)
    return expected


def _check_store(path, expected: dict, class_names, chunk=None):
    root = open_store(path)
    assert root.attrs["class_names"] == class_names
    assert root.attrs["splits"] == list(expected)
    for split, (images, labels) in expected.items():
        np.testing.assert_array_equal(root[f"{split}/images"][...], images)
        np.testing.assert_array_equal(root[f"{split}/labels"][...], labels)
        if chunk:
            assert root[f"{split}/images"].chunks == (chunk, *images.shape[1:])
        pixels = images.reshape(-1, images.shape[-1]).astype(np.float64)
        np.testing.assert_allclose(root[split].attrs["mean"], pixels.mean(0), atol=1e-3)
        np.testing.assert_allclose(root[split].attrs["std"], pixels.std(0), atol=1e-3)
    return root


# ---- CIFAR-10 --------------------------------------------------------------------------------------
def test_cifar10_tarball_to_store_exactly(tmp_path):
    source = tmp_path / "cifar-10-python.tar.gz"
    expected = write_cifar_tarball(source)
    out = prepare("cifar10", str(source), str(tmp_path / "cifar10.zarr"), chunk_examples=7, echo=None)
    root = _check_store(out, expected, CIFAR_NAMES, chunk=7)
    import hashlib

    assert root.attrs["sources"] == [{"name": "cifar-10-python.tar.gz",
                                      "sha256": hashlib.sha256(source.read_bytes()).hexdigest()}]
    assert root.attrs["dataset"] == "cifar10" and root.attrs["dflow_version"]
    assert root["train/labels"].dtype == np.int16
    assert not os.path.exists(out + ".partial")


def test_cifar10_without_source_says_what_to_download(tmp_path):
    with pytest.raises(SourceError, match=r"cifar-10-python\.tar\.gz.*toronto\.edu"):
        prepare("cifar10", None, str(tmp_path / "c.zarr"), echo=None)
    with pytest.raises(SourceError, match="does not exist"):
        prepare("cifar10", str(tmp_path / "nowhere.tar.gz"), str(tmp_path / "c.zarr"), echo=None)


def test_cifar10_truncated_archive(tmp_path):
    source = tmp_path / "cifar-10-python.tar.gz"
    write_cifar_tarball(source)
    data = source.read_bytes()
    source.write_bytes(data[:len(data) // 2])
    with pytest.raises(SourceError, match="truncated or not a gzipped tar.*download"):
        prepare("cifar10", str(source), str(tmp_path / "c.zarr"), echo=None)
    assert not os.path.exists(tmp_path / "c.zarr")


def test_cifar10_missing_member(tmp_path):
    source = tmp_path / "cifar-10-python.tar.gz"
    write_cifar_tarball(source, members={"data_batch_3": None})
    with pytest.raises(SourceError, match="lacks data_batch_3"):
        prepare("cifar10", str(source), str(tmp_path / "c.zarr"), echo=None)


class _RunsCode:
    def __reduce__(self):
        return (os.system, ("echo tampered",))


@pytest.mark.parametrize("member, data, message", [
    ("data_batch_2", _pickled(_RunsCode()), r"data_batch_2 is not a CIFAR-10 pickle.*refusing to load"),
    ("data_batch_4", _pickled({b"data": np.zeros((3, 100), np.uint8), b"labels": [0, 1, 2]}),
     r"data_batch_4: expected 'data' uint8 \(n, 3072\)"),
    ("test_batch", _pickled({b"data": np.zeros((2, 3072), np.uint8), b"labels": [3, 10]}),
     r"test label 10 of example 1 is out of range \[0, 10\)"),
    ("batches.meta", b"not a pickle", "batches.meta is not a CIFAR-10 pickle"),
])
def test_cifar10_tampered_members(tmp_path, member, data, message):
    source = tmp_path / "cifar-10-python.tar.gz"
    write_cifar_tarball(source, members={member: data})
    with pytest.raises(SourceError, match=message):
        prepare("cifar10", str(source), str(tmp_path / "c.zarr"), echo=None)


# ---- MNIST ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("gz", [True, False])
def test_mnist_idx_files_to_store_exactly(tmp_path, gz):
    expected = write_mnist(tmp_path / "mnist", gz=gz)
    out = prepare("mnist", str(tmp_path / "mnist"), str(tmp_path / "mnist.zarr"), echo=None)
    root = _check_store(out, expected, [str(d) for d in range(10)])
    names = [s["name"] for s in root.attrs["sources"]]
    assert names[0] == "train-images-idx3-ubyte" + (".gz" if gz else "")


def test_mnist_bad_files(tmp_path):
    directory = tmp_path / "mnist"
    write_mnist(directory, gz=False)
    images = directory / "t10k-images-idx3-ubyte"
    full = images.read_bytes()
    images.write_bytes(full[:-5])
    with pytest.raises(SourceError, match=r"t10k-images-idx3-ubyte is truncated: its header says \(10, 28"):
        prepare("mnist", str(directory), str(tmp_path / "m.zarr"), echo=None)
    images.write_bytes(b"\x00\x00\x0d\x03" + full[4:])
    with pytest.raises(SourceError, match="not an IDX file of unsigned bytes with 3 dimensions"):
        prepare("mnist", str(directory), str(tmp_path / "m.zarr"), echo=None)
    images.unlink()
    with pytest.raises(SourceError, match=r"has no t10k-images-idx3-ubyte\.gz"):
        prepare("mnist", str(directory), str(tmp_path / "m.zarr"), echo=None)


def test_mnist_label_count_mismatch(tmp_path):
    directory = tmp_path / "mnist"
    write_mnist(directory, gz=True)
    with gzip.open(directory / "train-labels-idx1-ubyte.gz", "wb") as f:
        f.write(_idx(np.zeros(29, np.uint8)))
    with pytest.raises(SourceError, match="holds 30 images but .* 29 labels"):
        prepare("mnist", str(directory), str(tmp_path / "m.zarr"), echo=None)


# ---- ImageNet ------------------------------------------------------------------------------------
WNIDS = ["n01440764", "n01443537", "n01484850"]


def write_imagenet(root, val_layout: str = "folders") -> dict:
    """train/<wnid>/*.JPEG of assorted sizes and a val/ in the asked layout; returns the labels."""
    from PIL import Image

    rng = np.random.default_rng(0)
    labels = {}
    sizes = [(300, 240), (240, 400), (256, 256)]
    for split, per_class in (("train", 3), ("val", 2)):
        for label, wnid in enumerate(WNIDS):
            for i in range(per_class):
                name = f"{wnid}_{i}.JPEG" if split == "train" else f"ILSVRC2012_val_{label * 10 + i:08d}.JPEG"
                folder = root / split / (wnid if split == "train" or val_layout == "folders" else "")
                folder.mkdir(parents=True, exist_ok=True)
                pixels = rng.integers(0, 256, (*sizes[(label + i) % 3][::-1], 3), dtype=np.uint8)
                Image.fromarray(pixels).save(folder / name, quality=90)
                labels[str(folder / name)] = label
    if val_layout == "kaggle":
        lines = ["ImageId,PredictionString"] + [
            f"{os.path.splitext(os.path.basename(p))[0]},{WNIDS[label]} 1 2 3 4"
            for p, label in labels.items() if "/val/" in p]
        (root / "LOC_val_solution.csv").write_text("\n".join(lines) + "\n")
    (root / "LOC_synset_mapping.txt").write_text("n01440764 tench, Tinca tinca\n"
                                                 "n01443537 goldfish, Carassius auratus\n"
                                                 "n01484850 great white shark\n")
    return labels


@pytest.mark.parametrize("val_layout", ["folders", "kaggle"])
def test_imagenet_tree_to_store_exactly(tmp_path, val_layout):
    from dflow.data.imagenet import decode_and_crop

    labels = write_imagenet(tmp_path / "ILSVRC", val_layout)
    out = prepare("imagenet", str(tmp_path / "ILSVRC"), str(tmp_path / "imagenet.zarr"), size=224,
                  chunk_examples=2, echo=None)
    root = open_store(out)
    assert root.attrs["splits"] == ["train", "validation"]
    assert root.attrs["class_names"][0] == "tench, Tinca tinca"
    assert root["train/images"].shape == (9, 224, 224, 3)
    assert root["validation/images"].shape == (6, 224, 224, 3)
    # every stored example is exactly its file, decoded and cropped, with its class
    stored = {}
    for split in ("train", "validation"):
        for image, label in zip(root[f"{split}/images"][...], root[f"{split}/labels"][...]):
            stored[image.tobytes()] = int(label)
    expected = {decode_and_crop(path, 224).tobytes(): label for path, label in labels.items()}
    assert stored == expected
    validation_labels = root["validation/labels"][...].tolist()
    assert validation_labels == [0, 0, 1, 1, 2, 2]  # name order


def test_decode_and_crop_keeps_aspect_and_centers(tmp_path):
    from PIL import Image

    from dflow.data.imagenet import decode_and_crop

    pixels = np.zeros((100, 400, 3), np.uint8)
    pixels[:, 150:250] = 255  # a white band in the middle third of a wide image
    Image.fromarray(pixels).save(tmp_path / "wide.png")
    crop = decode_and_crop(str(tmp_path / "wide.png"), 224)
    assert crop.shape == (224, 224, 3)
    # resized to 896x224, the band spans columns 336..560: the crop (336..560) is all white
    assert crop[:, 8:-8].min() == 255


@pytest.mark.slow
def test_resnet50_trains_on_a_prepared_imagenet_store_and_evaluates_with_moving_averages(tmp_path, capsys):
    from dflow.cli import main

    write_imagenet(tmp_path / "ILSVRC")
    store = prepare("imagenet", str(tmp_path / "ILSVRC"), str(tmp_path / "imagenet.zarr"), size=224,
                    echo=None)
    assert main(["train", "--model", "resnet50", "--dataset", store, "--local", "--steps", "2",
                 "--batch_size", "3", "--log_every", "1"]) == 0
    out = capsys.readouterr().out
    assert "step 2/2" in out and "test accuracy: " in out and "(6 images)" in out


def test_imagenet_bad_layouts(tmp_path):
    root = tmp_path / "ILSVRC"
    with pytest.raises(SourceError, match="has no train/ folder.*image-net.org"):
        prepare("imagenet", str(root), str(tmp_path / "i.zarr"), echo=None)
    (root / "train" / "cats").mkdir(parents=True)
    with pytest.raises(SourceError, match="no class folders named by WordNet id"):
        prepare("imagenet", str(root), str(tmp_path / "i.zarr"), echo=None)
    shutil.rmtree(root)
    write_imagenet(root, "flat")
    with pytest.raises(SourceError, match="holds images but no labels: put LOC_val_solution.csv"):
        prepare("imagenet", str(root), str(tmp_path / "i.zarr"), echo=None)
    with pytest.raises(ValueError, match="--size must be one of"):
        prepare("imagenet", str(root), str(tmp_path / "i.zarr"), size=100, echo=None)


def test_imagenet_corrupt_jpeg_names_the_file_and_a_rerun_finishes(tmp_path):
    root = tmp_path / "ILSVRC"
    write_imagenet(root)
    broken = root / "train" / WNIDS[1] / f"{WNIDS[1]}_2.JPEG"
    good = broken.read_bytes()
    broken.write_bytes(good[:200])
    out = str(tmp_path / "i.zarr")
    with pytest.raises(SourceError, match=rf"cannot decode .*{broken.name}.*rerun the same command"):
        prepare("imagenet", str(root), out, chunk_examples=1, echo=None)
    assert not os.path.exists(out) and os.path.isdir(out + ".partial")
    done_before = set(os.listdir(out + ".partial/done"))
    assert 0 < len(done_before) < 15
    broken.write_bytes(good)
    lines = []
    prepare("imagenet", str(root), out, chunk_examples=1, echo=lines.append)
    assert lines[0].startswith("resuming")
    assert lines[-1].startswith("chunks 15/15")
    assert not os.path.exists(out + ".partial")
    open_store(out)


def write_imagenet_shards(root, with_synsets: bool = True) -> dict:
    """ImageNet as build_imagenet_data.py shards it: 2 train and 1 validation TFRecord files of
    Examples (image/encoded JPEG, 1-based image/class/label, image/class/synset, ...); returns
    {(split, index): (jpeg bytes, label)}."""
    from PIL import Image

    import dflow as tf

    rng = np.random.default_rng(1)
    root.mkdir(parents=True)
    written = {}
    for split, shards, per_shard in (("train", 2, 4), ("validation", 1, 3)):
        for shard in range(shards):
            path = root / f"{split}-{shard:05d}-of-{shards:05d}"
            with tf.python_io.TFRecordWriter(str(path)) as writer:
                for i in range(per_shard):
                    label = (shard * per_shard + i) % 3
                    jpeg = io.BytesIO()
                    Image.fromarray(rng.integers(0, 256, (240 + 20 * i, 300, 3), dtype=np.uint8)).save(
                        jpeg, format="JPEG", quality=90)
                    feature = {"image/encoded": [jpeg.getvalue()], "image/class/label": [label + 1],
                               "image/class/synset": [WNIDS[label].encode()], "image/format": [b"JPEG"],
                               "image/height": [240 + 20 * i], "image/width": [300]}
                    example = tf.train.Example()
                    for key, values in feature.items():
                        kind = "bytes_list" if isinstance(values[0], bytes) else "int64_list"
                        getattr(example.features.feature[key], kind).value.extend(values)
                    writer.write(example.SerializeToString())
                    written[(split, len([k for k in written if k[0] == split]))] = (jpeg.getvalue(), label)
    if with_synsets:
        (root / "imagenet_lsvrc_2015_synsets.txt").write_text("\n".join(WNIDS) + "\n")
        (root / "imagenet_metadata.txt").write_text("n01440764\ttench, Tinca tinca\n"
                                                    "n01443537\tgoldfish, Carassius auratus\n")
    return written


def test_imagenet_tfrecord_shards_to_store_exactly(tmp_path):
    from dflow.data.imagenet import decode_and_crop

    written = write_imagenet_shards(tmp_path / "shards")
    out = prepare("imagenet", str(tmp_path / "shards"), str(tmp_path / "imagenet.zarr"), size=224,
                  chunk_examples=3, echo=None)
    root = open_store(out)
    assert root.attrs["class_names"] == ["tench, Tinca tinca", "goldfish, Carassius auratus", WNIDS[2]]
    assert root["train/images"].shape == (8, 224, 224, 3)
    for split in ("train", "validation"):  # in the shards' order, each its record decoded and cropped
        images, labels = root[f"{split}/images"][...], root[f"{split}/labels"][...].tolist()
        expected = [written[(split, i)] for i in range(len(labels))]
        assert labels == [label for _, label in expected]
        for image, (jpeg, _) in zip(images, expected):
            np.testing.assert_array_equal(image, decode_and_crop(io.BytesIO(jpeg), 224))


def test_imagenet_tfrecord_shards_damaged_or_without_classes(tmp_path):
    from dflow.errors import DataLossError

    root = tmp_path / "shards"
    write_imagenet_shards(root, with_synsets=False)
    with pytest.raises(SourceError, match="no list of the classes: put imagenet_lsvrc_2015_synsets.txt"):
        prepare("imagenet", str(root), str(tmp_path / "i.zarr"), echo=None)
    (root / "imagenet_lsvrc_2015_synsets.txt").write_text("\n".join(WNIDS[:2]) + "\n")
    with pytest.raises(SourceError, match=r"record at offset \d+\): its class n01484850 is not in the "):
        prepare("imagenet", str(root), str(tmp_path / "i.zarr"), echo=None)
    (root / "imagenet_lsvrc_2015_synsets.txt").write_text("\n".join(WNIDS) + "\n")
    shard = root / "train-00001-of-00002"
    damaged = bytearray(shard.read_bytes())
    damaged[len(damaged) // 2] ^= 0xFF  # inside a JPEG: only the record's checksum can tell
    shard.write_bytes(bytes(damaged))
    with pytest.raises(DataLossError, match="train-00001-of-00002: corrupted record at offset .* data's "
                                            "checksum"):
        prepare("imagenet", str(root), str(tmp_path / "j.zarr"), echo=None)  # (i.zarr would resume)
    shard.write_bytes(bytes(damaged[:-5]))
    with pytest.raises(DataLossError, match="cut off"):
        prepare("imagenet", str(root), str(tmp_path / "k.zarr"), echo=None)
    (root / "validation-00000-of-00001").unlink()
    with pytest.raises(SourceError, match="none named validation-NNNNN-of-NNNNN"):
        prepare("imagenet", str(root), str(tmp_path / "l.zarr"), echo=None)


# ---- digits, synthetic, the writer ----------------------------------------------------------------
@pytest.mark.parametrize("options, side", [({}, 28), ({"size": 8}, 8)])
def test_digits_store_matches_load_digits(tmp_path, options, side):
    """28x28 by default, as ``--dataset digits`` resizes them for the MNIST models; 8: as shipped."""
    from dflow.data import load_digits

    out = prepare("digits", out=str(tmp_path / "digits.zarr"), echo=None, **options)
    split = load_digits((side, side, 1), seed=0)
    root = open_store(out)
    assert root["train/images"].shape == (1437, side, side, 1)
    np.testing.assert_array_equal(root["train/images"][...], np.round(split.train_images * 255))
    np.testing.assert_array_equal(root["test/labels"][...], split.test_labels)
    assert root["train/images"].chunks[0] == 90  # at least 16 chunks: ceil(1437 / 16)


@pytest.mark.parametrize("model", [pytest.param("deep_mnist", marks=pytest.mark.slow), "mnist_dnn"])
def test_dflow_data_prepare_digits_writes_a_store_the_mnist_models_train_on(model, tmp_path, monkeypatch,
                                                                             capsys):
    from dflow.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(["data", "prepare", "digits"]) == 0
    assert "train: images (1437, 28, 28, 1) uint8" in capsys.readouterr().out
    assert main(["train", "--model", model, "--dataset", "datasets/digits.zarr", "--steps", "20",
                 "--batch_size", "32", "--log_every", "20", "--local"]) == 0
    lines = capsys.readouterr().out.splitlines()
    shape = "784" if model == "mnist_dnn" else "28x28x1"  # mnist_dnn's flat inputs: the images flattened
    assert lines[0].startswith(f"training {model} on datasets/digits.zarr: 1437 train / 360 test "
                               f"examples of {shape}")
    accuracy = float(lines[-1].split()[2])
    assert lines[-1].endswith("(360 images)") and accuracy > 0.3  # chance is 0.1


def test_dflow_data_info_takes_the_name_that_train_takes(tmp_path, monkeypatch, capsys):
    from dflow.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(["data", "info", "digits"]) == 1
    err = capsys.readouterr().err
    assert "dflow data info: error: no store 'digits': it is not a path, and datasets/digits.zarr" in err
    assert "prepare it with `dflow data prepare digits`" in err
    assert main(["data", "prepare", "digits", "--size", "8"]) == 0
    capsys.readouterr()
    for name in ("digits", "datasets/digits.zarr", str(tmp_path / "datasets" / "digits.zarr")):
        assert main(["data", "info", name]) == 0
        out = capsys.readouterr().out
        assert ": digits (written by dflow " in out and "train: images (1437, 8, 8, 1) uint8" in out


def test_synthetic_is_a_function_of_the_seed_not_the_chunking(tmp_path):
    options = {"image_shape": (6, 5, 2), "num_classes": 3, "train_count": 2100, "test_count": 5}
    a = open_store(prepare("synthetic", out=str(tmp_path / "a.zarr"), chunk_examples=100, echo=None,
                           seed=4, **options))
    b = open_store(prepare("synthetic", out=str(tmp_path / "b.zarr"), chunk_examples=333, echo=None,
                           seed=4, **options))
    c = open_store(prepare("synthetic", out=str(tmp_path / "c.zarr"), echo=None, seed=5, **options))
    np.testing.assert_array_equal(a["train/images"][...], b["train/images"][...])
    np.testing.assert_array_equal(a["train/labels"][...], b["train/labels"][...])
    assert not np.array_equal(a["train/images"][...], c["train/images"][...])
    assert set(np.unique(a["train/labels"][...])) == {0, 1, 2}


def test_existing_store_needs_overwrite(tmp_path):
    out = str(tmp_path / "s.zarr")
    options = {"image_shape": (4, 4, 1), "train_count": 40, "test_count": 0, "echo": None}
    prepare("synthetic", out=out, seed=1, **options)
    with pytest.raises(FileExistsError, match="--overwrite"):
        prepare("synthetic", out=out, seed=2, **options)
    prepare("synthetic", out=out, seed=2, overwrite=True, **options)
    assert open_store(out)["train/images"].shape == (40, 4, 4, 1)
    assert sorted(os.listdir(tmp_path)) == ["s.zarr"]


def test_a_half_written_store_is_never_taken_for_a_finished_one(tmp_path):
    from dflow.data.store import DatasetSource, SplitSource
    from dflow.errors import FailedPreconditionError, NotFoundError

    def read(start, stop):
        if start >= 20:
            raise KeyboardInterrupt  # the preparation dies midway
        return np.full((stop - start, 2, 2, 1), start, np.uint8), np.zeros(stop - start, np.int64)

    source = DatasetSource("tiny", ["only"], [SplitSource("train", 40, (2, 2, 1), read)], [])
    out = str(tmp_path / "tiny.zarr")
    with pytest.raises(KeyboardInterrupt):
        write_store(source, out, chunk_examples=10, echo=None)
    with pytest.raises(NotFoundError, match="an interrupted `dflow data prepare` left it"):
        open_store(out)
    with pytest.raises(FailedPreconditionError, match="unfinished preparation"):
        open_store(out + ".partial")
    with pytest.raises(FailedPreconditionError, match="not a finished dflow dataset store"):
        open_store(out + ".partial/store.zarr")


def test_prepare_on_a_dask_cluster(tmp_path):
    from distributed import Client, LocalCluster

    options = {"image_shape": (4, 4, 3), "train_count": 64, "test_count": 16, "seed": 3}
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        lines = []
        out = prepare("synthetic", out=str(tmp_path / "d.zarr"), chunk_examples=8, client=client,
                      echo=lines.append, **options)
    local = prepare("synthetic", out=str(tmp_path / "l.zarr"), chunk_examples=8, echo=None, **options)
    for array in ("train/images", "test/labels"):
        np.testing.assert_array_equal(open_store(out)[array][...], open_store(local)[array][...])
    assert lines[-1].startswith("chunks 10/10")
