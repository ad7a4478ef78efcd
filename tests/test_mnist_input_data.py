"""``tensorflow.examples.tutorials.mnist.input_data`` as TF 1.x's tutorials use it, over real
gzipped IDX files (scikit-learn's digits drawn into 28 x 28 MNIST frames): the splits, the
scaling, one-hot labels, epochs of batches, the download of missing files (from a file://
mirror: no network here), damaged files refused, and fully_connected_feed's model module
trained (tests/test_scripts.py runs mnist_softmax.py on it with ``dflow run``)."""

import gzip
import os
import shutil
import struct

import numpy as np
import pytest
from conftest import digits_in_mnist_frames

import dflow as tf
from dflow.data.sources import SourceError
from dflow.examples.tutorials.mnist import input_data

FILES = ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz",
         "t10k-labels-idx1-ubyte.gz")


@pytest.fixture(scope="module")
def mnist_dir(tmp_path_factory):
    """The 1,797 digits as MNIST's four files: the first 1,497 the training set, 300 the test set."""
    images, labels = digits_in_mnist_frames()
    folder = tmp_path_factory.mktemp("MNIST_data")
    for prefix, part in (("train", slice(0, 1497)), ("t10k", slice(1497, None))):
        with gzip.open(folder / f"{prefix}-images-idx3-ubyte.gz", "wb") as f:
            f.write(struct.pack(">IIII", 2051, len(images[part]), 28, 28) + images[part].tobytes())
        with gzip.open(folder / f"{prefix}-labels-idx1-ubyte.gz", "wb") as f:
            f.write(struct.pack(">II", 2049, len(labels[part])) + labels[part].tobytes())
    return str(folder), images, labels


def test_splits_scaling_and_one_hot_labels_as_tf1s_reader(mnist_dir):
    folder, images, labels = mnist_dir
    mnist = input_data.read_data_sets(folder, one_hot=True, validation_size=200)
    sizes = mnist.train.num_examples, mnist.validation.num_examples, mnist.test.num_examples
    assert sizes == (1297, 200, 300)
    # the validation set is the first images of the training file, then the rest train
    assert mnist.validation.images.dtype == np.float32 and mnist.validation.images.shape == (200, 784)
    scale = np.float32(1 / 255)
    np.testing.assert_array_equal(mnist.validation.images, images[:200].reshape(200, 784) * scale)
    np.testing.assert_array_equal(mnist.train.images[0], images[200].reshape(784) * scale)
    assert mnist.test.labels.dtype == np.float64 and mnist.test.labels.shape == (300, 10)
    np.testing.assert_array_equal(mnist.test.labels.argmax(1), labels[1497:])
    assert mnist.test.labels.sum() == 300
    raw = input_data.read_data_sets(folder, dtype=tf.uint8, reshape=False, validation_size=0)
    assert raw.train.images.dtype == np.uint8 and raw.train.images.shape == (1497, 28, 28, 1)
    np.testing.assert_array_equal(raw.test.labels, labels[1497:])
    with pytest.raises(ValueError, match="Validation size should be between 0 and 1497"):
        input_data.read_data_sets(folder)  # the default 5,000 is more than these files hold
    with pytest.raises(TypeError, match="expected uint8 or float32"):
        input_data.read_data_sets(folder, dtype=tf.float64, validation_size=0)


def test_every_example_once_an_epoch_and_the_last_batch_wraps(mnist_dir):
    folder, _, labels = mnist_dir
    test = input_data.read_data_sets(folder, validation_size=0, seed=3).test  # 300 examples
    seen = [test.next_batch(70)[1] for _ in range(4)]  # 280 of the first epoch
    assert test.epochs_completed == 0
    wrapped = test.next_batch(70)  # the last 20 of epoch 1, then 50 of epoch 2 (reshuffled)
    assert test.epochs_completed == 1 and len(wrapped[0]) == len(wrapped[1]) == 70
    first_epoch = np.concatenate(seen + [wrapped[1][:20]])
    np.testing.assert_array_equal(np.sort(first_epoch), np.sort(labels[1497:]))
    assert not np.array_equal(first_epoch, labels[1497:])  # shuffled
    again = input_data.read_data_sets(folder, validation_size=0, seed=3).test
    np.testing.assert_array_equal(np.concatenate([again.next_batch(70)[1] for _ in range(4)]),
                                  np.concatenate(seen))  # a seed repeats the order
    in_order = input_data.read_data_sets(folder, validation_size=0).test
    np.testing.assert_array_equal(in_order.next_batch(10, shuffle=False)[1], labels[1497:1507])


def test_missing_files_are_downloaded_whole_or_refused_naming_them(mnist_dir, tmp_path):
    mirror = mnist_dir[0]
    fetched = input_data.read_data_sets(str(tmp_path / "new"), source_url=f"file://{mirror}/",
                                        validation_size=0)
    assert sorted(os.listdir(tmp_path / "new")) == sorted(FILES) and fetched.test.num_examples == 300
    with pytest.raises(SourceError, match=r"train-images-idx3-ubyte.gz is not in .*empty.* could not be "
                                          r"downloaded from file:///nowhere/.* put the four files"):
        input_data.read_data_sets(str(tmp_path / "empty"), source_url="file:///nowhere/")
    assert os.listdir(tmp_path / "empty") == []  # no partial file left behind


def test_damaged_files_are_refused_naming_the_file(mnist_dir, tmp_path):
    for name in FILES:
        shutil.copy(os.path.join(mnist_dir[0], name), tmp_path / name)
    data = gzip.open(os.path.join(mnist_dir[0], FILES[3])).read()
    with gzip.open(tmp_path / FILES[3], "wb") as f:
        f.write(data[:-10])  # ten labels short
    with pytest.raises(SourceError, match="t10k-labels-idx1-ubyte.gz is truncated"):
        input_data.read_data_sets(str(tmp_path), validation_size=0)
    with gzip.open(tmp_path / FILES[3], "wb") as f:
        f.write(data[:8] + bytes([12]) + data[9:])  # a label that is no digit
    with pytest.raises(SourceError, match="label 12 is not a digit"):
        input_data.read_data_sets(str(tmp_path), validation_size=0)
    with open(tmp_path / FILES[0], "wb") as f:
        f.write(b"not gzip")
    with pytest.raises(SourceError, match="train-images-idx3-ubyte.gz is truncated or not gzip"):
        input_data.read_data_sets(str(tmp_path), validation_size=0)


def test_the_fully_connected_feed_tutorials_model_module_trains(mnist_dir):
    """``from tensorflow.examples.tutorials.mnist import mnist``: inference, loss, training and
    evaluation as fully_connected_feed.py calls them (fixed-batch placeholders, integer labels)."""
    from dflow.examples.tutorials.mnist import mnist

    data = input_data.read_data_sets(mnist_dir[0], validation_size=0, seed=1)
    with tf.Graph().as_default():
        tf.set_random_seed(0)
        images = tf.placeholder(tf.float32, shape=(100, mnist.IMAGE_PIXELS))
        labels = tf.placeholder(tf.int32, shape=(100))
        logits = mnist.inference(images, 128, 32)
        loss = mnist.loss(logits, labels)
        train_op = mnist.training(loss, 0.1)
        eval_correct = mnist.evaluation(logits, labels)
        assert [v.op.name for v in tf.global_variables()] == [
            f"{layer}/{kind}" for layer in ("hidden1", "hidden2", "softmax_linear")
            for kind in ("weights", "biases")] + ["global_step"]
        assert len(tf.get_collection(tf.GraphKeys.SUMMARIES)) == 1
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            for _ in range(400):
                batch_images, batch_labels = data.train.next_batch(100)
                _, loss_value = sess.run([train_op, loss], {images: batch_images, labels: batch_labels})
            assert sess.run("global_step:0") == 400
            correct = sum(sess.run(eval_correct, dict(zip((images, labels), data.test.next_batch(100))))
                          for _ in range(3))
    assert loss_value < 0.5 and correct >= 0.85 * 300


def test_contrib_learn_load_dataset_reads_mnist_data_and_iris(tmp_path, monkeypatch):
    """TF 1.x's cnn_mnist layers tutorial: ``tf.contrib.learn.datasets.load_dataset("mnist")``
    reads ./MNIST-data with read_data_sets' defaults (5,000 validation images), and iris is
    scikit-learn's copy of the CSV that TF bundled."""
    images, labels = digits_in_mnist_frames()
    train = np.resize(np.arange(len(images)), 5100)  # the digits again, past the 5,000 validation images
    folder = tmp_path / "MNIST-data"
    folder.mkdir()
    for prefix, rows in (("train", train), ("t10k", np.arange(100))):
        with gzip.open(folder / f"{prefix}-images-idx3-ubyte.gz", "wb") as f:
            f.write(struct.pack(">IIII", 2051, len(rows), 28, 28) + images[rows].tobytes())
        with gzip.open(folder / f"{prefix}-labels-idx1-ubyte.gz", "wb") as f:
            f.write(struct.pack(">II", 2049, len(rows)) + labels[rows].tobytes())
    monkeypatch.chdir(tmp_path)
    mnist = tf.contrib.learn.datasets.load_dataset("mnist")
    sizes = mnist.train.num_examples, mnist.validation.num_examples, mnist.test.num_examples
    assert sizes == (100, 5000, 100)
    np.testing.assert_array_equal(mnist.train.labels, labels[train[5000:]])
    iris = tf.contrib.learn.datasets.load_dataset("iris")
    assert iris.data.shape == (150, 4) and np.bincount(iris.target).tolist() == [50, 50, 50]
    with pytest.raises(ValueError, match="Name of dataset is not found: boston.*not supported"):
        tf.contrib.learn.datasets.load_dataset("boston")
