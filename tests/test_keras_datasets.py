"""tf.keras.datasets' load_data() read from Keras's own files (made here in their formats: mnist.npz,
the fashion-mnist IDX folder, the extracted CIFAR python batches), never downloaded, as TF 1.x graph
scripts load them; tf.keras.utils.to_categorical; the rest of tf.keras refused by name."""

import os
import pickle
import tarfile

import numpy as np
import pytest
from test_data_prepare import write_cifar_tarball, write_mnist

import dflow as tf


@pytest.fixture
def keras_home(tmp_path, monkeypatch):
    monkeypatch.setenv("KERAS_HOME", str(tmp_path))
    os.makedirs(tmp_path / "datasets")
    return tmp_path / "datasets"


def test_mnist_from_keras_npz_as_keras_gives_it(keras_home):
    rng = np.random.default_rng(0)
    arrays = {"x_train": rng.integers(0, 256, (6, 28, 28), dtype=np.uint8),
              "y_train": np.arange(6, dtype=np.uint8),
              "x_test": rng.integers(0, 256, (2, 28, 28), dtype=np.uint8),
              "y_test": np.arange(2, dtype=np.uint8)}
    np.savez_compressed(keras_home / "mnist.npz", **arrays)
    (x_train, y_train), (x_test, y_test) = tf.keras.datasets.mnist.load_data()
    for got, name in ((x_train, "x_train"), (y_train, "y_train"), (x_test, "x_test"), (y_test, "y_test")):
        np.testing.assert_array_equal(got, arrays[name])
        assert got.dtype == np.uint8


def test_fashion_mnist_from_its_idx_folder(keras_home):
    expected = write_mnist(keras_home / "fashion-mnist", n_train=5, n_test=3)
    (x_train, y_train), (x_test, y_test) = tf.keras.datasets.fashion_mnist.load_data()
    np.testing.assert_array_equal(x_train, expected["train"][0][..., 0])
    np.testing.assert_array_equal(y_test, expected["test"][1])
    assert x_train.shape == (5, 28, 28) and x_test.shape == (3, 28, 28)


def test_cifar10_from_the_extracted_python_batches_channels_last(keras_home, tmp_path):
    expected = write_cifar_tarball(tmp_path / "cifar-10-python.tar.gz", per_batch=4)
    with tarfile.open(tmp_path / "cifar-10-python.tar.gz") as archive:
        archive.extractall(keras_home, filter="data")  # as Keras's get_file(untar=True) leaves it
    (x_train, y_train), (x_test, y_test) = tf.keras.datasets.cifar10.load_data()
    np.testing.assert_array_equal(x_train, expected["train"][0])
    np.testing.assert_array_equal(y_train[:, 0], expected["train"][1])
    assert x_train.shape == (20, 32, 32, 3) and y_train.shape == (20, 1) and y_train.dtype == np.uint8
    np.testing.assert_array_equal(x_test, expected["test"][0])


@pytest.mark.parametrize("label_mode", ["fine", "coarse"])
def test_cifar100_fine_or_coarse_labels(keras_home, label_mode):
    rng = np.random.default_rng(1)
    folder = keras_home / "cifar-100-python"
    os.makedirs(folder)
    images = {}
    for split, n in (("train", 5), ("test", 2)):
        images[split] = rng.integers(0, 256, (n, 32, 32, 3), dtype=np.uint8)
        batch = {b"data": images[split].transpose(0, 3, 1, 2).reshape(n, 3072),
                 b"fine_labels": list(range(n)), b"coarse_labels": [n - 1 - i for i in range(n)]}
        (folder / split).write_bytes(pickle.dumps(batch, protocol=2))
    (x_train, y_train), (x_test, y_test) = tf.keras.datasets.cifar100.load_data(label_mode=label_mode)
    np.testing.assert_array_equal(x_train, images["train"])
    assert y_train[:, 0].tolist() == (list(range(5)) if label_mode == "fine" else [4, 3, 2, 1, 0])
    assert y_test.shape == (2, 1)


def test_a_missing_file_says_where_to_put_it_and_nothing_is_downloaded(keras_home):
    with pytest.raises(ValueError, match=r"mnist.npz does not exist: dflow downloads nothing; put mnist.npz "
                                         r"there \(from https://storage.googleapis.com"):
        tf.keras.datasets.mnist.load_data()
    (keras_home / "mnist.npz").write_bytes(b"not an npz")
    with pytest.raises(ValueError, match="is not Keras's mnist.npz"):
        tf.keras.datasets.mnist.load_data()
    assert os.listdir(keras_home) == ["mnist.npz"]


def test_to_categorical_and_the_rest_of_keras_refused(keras_home):
    np.testing.assert_array_equal(tf.keras.utils.to_categorical(np.array([[2], [0]]), 4),
                                  [[0, 0, 1, 0], [1, 0, 0, 0]])
    with pytest.raises(ValueError, match=r"labels must be in \[0, 2\)"):
        tf.keras.utils.to_categorical([3], 2)
    with pytest.raises(AttributeError, match="tf.keras.Sequential is not supported by dflow: build the model "
                                             "with tf.layers"):
        _ = tf.keras.Sequential
