"""The TF 1.x queue input pipeline as the CIFAR-10 tutorial feeds itself, on a small
cifar-10-binary.tar.gz in the real format (1 label byte + 3072 bytes of CHW pixels per record):
string_input_producer -> FixedLengthRecordReader -> decode_raw -> distortions -> shuffle_batch,
run under a Coordinator with start_queue_runners and under MonitoredTrainingSession."""

from __future__ import annotations

import io
import os
import tarfile
import threading

import numpy as np
import pytest

import dflow as tf

HEIGHT, WIDTH, DEPTH = 32, 32, 3
LABEL_BYTES, IMAGE_BYTES = 1, HEIGHT * WIDTH * DEPTH
RECORD_BYTES = LABEL_BYTES + IMAGE_BYTES
CROP = 24
TRAIN_FILES = [f"data_batch_{i}.bin" for i in range(1, 6)]
COLORS = np.array([[200, 40, 40], [40, 200, 40], [40, 40, 200], [200, 200, 40]])  # the class is the hue


def cifar_records(count: int, rng) -> tuple[np.ndarray, np.ndarray]:
    """Labels and CHW uint8 images whose class shows in the colour (so a CNN can learn it),
    with enough noise that every pixel, crop and flip differs."""
    labels = rng.integers(0, len(COLORS), count).astype(np.uint8)
    noise = rng.normal(0, 40, (count, DEPTH, HEIGHT, WIDTH))
    images = np.clip(COLORS[labels][:, :, None, None] + noise, 0, 255).astype(np.uint8)
    return labels, images


def write_cifar10_binary_tarball(directory, records_per_file: int, seed: int = 0) -> dict:
    """cifar-10-binary.tar.gz as its publisher lays it out; {file name: (labels, CHW images)}."""
    rng, contents = np.random.default_rng(seed), {}
    path = os.path.join(directory, "cifar-10-binary.tar.gz")
    with tarfile.open(path, "w:gz") as tar:
        for name in [*TRAIN_FILES, "test_batch.bin", "batches.meta.txt"]:
            if name.endswith(".txt"):
                data = "\n".join(f"class{i}" for i in range(10)).encode()
            else:
                labels, images = contents[name] = cifar_records(records_per_file, rng)
                data = np.concatenate([labels[:, None], images.reshape(len(labels), -1)], axis=1).tobytes()
            info = tarfile.TarInfo(f"cifar-10-batches-bin/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return contents


@pytest.fixture(scope="module")
def cifar(tmp_path_factory):
    """The data dir after the tutorial's maybe_download_and_extract: the tarball, extracted."""
    directory = str(tmp_path_factory.mktemp("cifar10_data"))
    contents = write_cifar10_binary_tarball(directory, records_per_file=40)
    with tarfile.open(os.path.join(directory, "cifar-10-binary.tar.gz")) as tar:
        tar.extractall(directory, filter="data")
    data_dir = os.path.join(directory, "cifar-10-batches-bin")
    return data_dir, {os.path.join(data_dir, name): value for name, value in contents.items()}


def read_cifar10(filename_queue):
    """One record of the binary format, as the tutorial reads it: (key, int32 label [1], HWC uint8 image)."""
    reader = tf.FixedLengthRecordReader(record_bytes=RECORD_BYTES)
    key, value = reader.read(filename_queue)
    record = tf.decode_raw(value, tf.uint8)
    label = tf.cast(tf.strided_slice(record, [0], [LABEL_BYTES]), tf.int32)
    depth_major = tf.reshape(tf.strided_slice(record, [LABEL_BYTES], [RECORD_BYTES]), [DEPTH, HEIGHT, WIDTH])
    return key, label, tf.transpose(depth_major, [1, 2, 0])


def distorted(image):
    image = tf.random_crop(tf.cast(image, tf.float32), [CROP, CROP, 3])
    image = tf.image.random_flip_left_right(image)
    image = tf.image.random_brightness(image, max_delta=63)
    image = tf.image.random_contrast(image, lower=0.2, upper=1.8)
    return tf.image.per_image_standardization(image)


def record_of(contents: dict, key: bytes):
    """The file's label and HWC image for a reader key ``b'path:index'``."""
    name, _, index = key.decode().rpartition(":")
    labels, images = contents[name]
    return int(labels[int(index)]), images[int(index)].transpose(1, 2, 0)


def drain(sess, fetches) -> list:
    """Run ``fetches`` until the input is exhausted (OutOfRangeError), as TF scripts loop."""
    results = []
    try:
        while True:
            results.append(sess.run(fetches))
    except tf.errors.OutOfRangeError:
        return results


def test_records_come_out_with_the_files_labels_and_pixels(cifar):
    data_dir, contents = cifar
    files = [os.path.join(data_dir, name) for name in TRAIN_FILES]
    filename_queue = tf.train.string_input_producer(files, num_epochs=1, shuffle=False)
    key, label, image = read_cifar10(filename_queue)
    label.set_shape([1])
    keys, labels, images = tf.train.batch([key, label, image], batch_size=16, num_threads=1,
                                          allow_smaller_final_batch=True)
    assert images.shape.as_list() == [None, HEIGHT, WIDTH, DEPTH]
    with tf.Session() as sess:
        sess.run(tf.local_variables_initializer())
        coord = tf.train.Coordinator()
        threads = tf.train.start_queue_runners(sess=sess, coord=coord)
        batches = drain(sess, [keys, labels, images])
        coord.request_stop()
        coord.join(threads)
    got_keys = [k for batch_keys, _, _ in batches for k in batch_keys]
    # one thread, no shuffling: every record of every file, in file order
    assert got_keys == [f"{name}:{i}".encode() for name in files for i in range(40)]
    for batch_keys, batch_labels, batch_images in batches:
        for k, lab, img in zip(batch_keys, batch_labels, batch_images):
            want_label, want_image = record_of(contents, k)
            assert lab.tolist() == [want_label]
            np.testing.assert_array_equal(img, want_image)


def window_matching(output, image):
    """The (top, left, flipped) whose crop of ``image`` ``output`` is, per channel, a positive affine
    map of (what brightness, contrast and standardization leave of a crop), or None."""
    matches = []
    for flipped in (False, True):
        source = image[:, ::-1] if flipped else image
        for top in range(HEIGHT - CROP + 1):
            for left in range(WIDTH - CROP + 1):
                crop = source[top:top + CROP, left:left + CROP].astype(np.float64)
                fits = [np.corrcoef(crop[..., c].ravel(), output[..., c].ravel())[0, 1] for c in range(3)]
                if min(fits) > 0.9999:
                    matches.append((top, left, flipped))
    return matches


def test_distorted_inputs_are_windows_of_the_files_images(cifar):
    data_dir, contents = cifar
    files = [os.path.join(data_dir, name) for name in TRAIN_FILES]
    key, label, image = read_cifar10(tf.train.string_input_producer(files))
    float_image = distorted(image)
    float_image.set_shape([CROP, CROP, 3])
    label.set_shape([1])
    keys, images, labels = tf.train.shuffle_batch([key, float_image, label], batch_size=8, num_threads=2,
                                                  capacity=60 + 3 * 8, min_after_dequeue=60)
    labels = tf.reshape(labels, [8])
    assert images.shape.as_list() == [8, CROP, CROP, 3] and labels.shape.as_list() == [8]
    with tf.Session() as sess:
        coord = tf.train.Coordinator()
        threads = tf.train.start_queue_runners(sess, coord)
        batch_keys, batch_images, batch_labels = sess.run([keys, images, labels])
        coord.request_stop()
        coord.join(threads, stop_grace_period_secs=10)
    for k, img, lab in zip(batch_keys, batch_images, batch_labels):
        want_label, want_image = record_of(contents, k)
        assert lab == want_label
        np.testing.assert_allclose([img.mean(), img.std()], [0.0, 1.0], atol=1e-3)  # standardized
        assert len(window_matching(img, want_image)) == 1
    assert len(set(batch_keys.tolist())) == 8


def test_num_epochs_then_out_of_range_with_shuffled_files(cifar):
    data_dir, contents = cifar
    files = [os.path.join(data_dir, name) for name in TRAIN_FILES]
    key, label, _ = read_cifar10(tf.train.string_input_producer(files, num_epochs=2, shuffle=True))
    label.set_shape([1])
    keys, labels = tf.train.batch([key, label], batch_size=7, num_threads=3, allow_smaller_final_batch=True)
    with tf.Session() as sess:
        sess.run([tf.global_variables_initializer(), tf.local_variables_initializer()])
        coord = tf.train.Coordinator()
        threads = tf.train.start_queue_runners(sess, coord)
        batches = drain(sess, [keys, labels])
        with pytest.raises(tf.errors.OutOfRangeError):  # and it stays exhausted
            sess.run(keys)
        coord.request_stop()
        coord.join(threads)
    seen = [k for batch_keys, _ in batches for k in batch_keys]
    assert sorted(seen) == sorted([f"{f}:{i}".encode() for f in files for i in range(40)] * 2)
    for batch_keys, batch_labels in batches:
        assert [record_of(contents, k)[0] for k in batch_keys] == batch_labels.ravel().tolist()


def test_string_input_producer_reshuffles_every_epoch():
    names = [f"file{i}.bin" for i in range(5)]
    filename_queue = tf.train.string_input_producer(names, num_epochs=10, seed=3)
    name = filename_queue.dequeue()
    with tf.Session() as sess:
        sess.run(tf.local_variables_initializer())
        coord = tf.train.Coordinator()
        threads = tf.train.start_queue_runners(sess, coord)
        produced = [n.decode() for n in drain(sess, name)]
        coord.request_stop()
        coord.join(threads)
    epochs = [produced[i:i + 5] for i in range(0, 50, 5)]
    assert len(produced) == 50 and all(sorted(epoch) == names for epoch in epochs)
    assert len({tuple(epoch) for epoch in epochs}) > 1


def test_a_missing_local_variables_initializer_reaches_coord_join(cifar):
    """As in TF: num_epochs counts in a local variable; without its initializer the runner fails,
    the consumer sees the queue closed, and coord.join raises the runner's error."""
    data_dir, _ = cifar
    filename_queue = tf.train.string_input_producer([os.path.join(data_dir, "test_batch.bin")], num_epochs=1)
    key, _, _ = read_cifar10(filename_queue)
    keys = tf.train.batch([key], batch_size=4)
    with tf.Session() as sess:
        coord = tf.train.Coordinator()
        threads = tf.train.start_queue_runners(sess, coord)
        with pytest.raises(tf.errors.OutOfRangeError):
            sess.run(keys)
        with pytest.raises(tf.errors.FailedPreconditionError, match="epochs"):
            coord.join(threads, stop_grace_period_secs=10)


def test_eval_pattern_with_create_threads(cifar):
    """cifar10_eval.py's loop: create_threads for each runner, count correct answers, stop and join."""
    data_dir, contents = cifar
    filename_queue = tf.train.string_input_producer([os.path.join(data_dir, "test_batch.bin")])
    _, label, image = read_cifar10(filename_queue)
    resized = tf.image.resize_image_with_crop_or_pad(tf.cast(image, tf.float32), CROP, CROP)
    float_image = tf.image.per_image_standardization(resized)
    float_image.set_shape([CROP, CROP, 3])
    label.set_shape([1])
    # one thread, so the first 80 examples are exactly two passes over the file
    images, labels = tf.train.batch([float_image, label], batch_size=10, num_threads=1, capacity=40)
    labels = tf.reshape(labels, [10])
    with tf.Session() as sess:
        coord = tf.train.Coordinator()
        try:
            threads = []
            for qr in tf.get_collection(tf.GraphKeys.QUEUE_RUNNERS):
                threads.extend(qr.create_threads(sess, coord=coord, daemon=True, start=True))
            seen = [sess.run(labels) for _ in range(8)]  # two epochs of the 40 test records
        except Exception as e:  # noqa: BLE001 - the tutorial's own handling
            coord.request_stop(e)
        coord.request_stop()
        coord.join(threads, stop_grace_period_secs=10)
    counts = np.bincount(np.concatenate(seen), minlength=4)
    test_labels = contents[os.path.join(data_dir, "test_batch.bin")][0]
    np.testing.assert_array_equal(counts, 2 * np.bincount(test_labels, minlength=4))


def test_monitored_training_session_starts_runners_and_ends_when_input_runs_out(cifar):
    data_dir, contents = cifar
    files = [os.path.join(data_dir, name) for name in TRAIN_FILES]
    _, label, _ = read_cifar10(tf.train.string_input_producer(files, num_epochs=1))
    label.set_shape([1])
    labels = tf.train.shuffle_batch([label], batch_size=16, capacity=80, min_after_dequeue=30, num_threads=2,
                                    allow_smaller_final_batch=True)
    step = tf.train.get_or_create_global_step()
    count = tf.assign_add(step, tf.cast(tf.size(labels), tf.int64))
    seen = []
    with tf.train.MonitoredTrainingSession() as sess:  # runs the local initializer, starts the runners
        while not sess.should_stop():
            seen.append(sess.run([labels, count])[0])
    # the `with` ended quietly at OutOfRangeError, and the runners' threads are gone
    assert sorted(np.concatenate(seen).ravel()) == sorted(np.concatenate([contents[f][0] for f in files]))
    assert not [t for t in threading.enumerate() if t.name.startswith("QueueRunner")]


def test_monitored_training_session_reports_a_runner_error_instead_of_an_empty_queue(tmp_path):
    broken = tmp_path / "truncated.bin"
    broken.write_bytes(b"\0" * (RECORD_BYTES + 5))  # not a whole number of records
    key, _, _ = read_cifar10(tf.train.string_input_producer([str(broken)]))
    keys = tf.train.batch([key], batch_size=2)
    with pytest.raises(tf.errors.DataLossError, match="record_bytes=3073"):
        with tf.train.MonitoredTrainingSession() as sess:
            sess.run(keys)


def test_closing_the_session_stops_runners_blocked_on_a_full_queue(cifar):
    data_dir, _ = cifar
    key, _, _ = read_cifar10(tf.train.string_input_producer([os.path.join(data_dir, "test_batch.bin")]))
    keys = tf.train.batch([key], batch_size=2, capacity=4, num_threads=3)
    sess = tf.Session()
    threads = tf.train.start_queue_runners(sess)  # no coordinator: only the session's close stops them
    sess.run(keys)
    sess.close()
    for thread in threads:
        thread.join(timeout=10)
    assert not any(thread.is_alive() for thread in threads)


def test_queues_block_and_wake_and_close():
    queue = tf.FIFOQueue(capacity=3, dtypes=[tf.float32, tf.int32], shapes=[[2], []])
    value, index = tf.placeholder(tf.float32, [2]), tf.placeholder(tf.int32, [])
    enqueue, dequeue = queue.enqueue([value, index]), queue.dequeue_many(2)
    close = queue.close()
    with tf.Session() as sess:
        got = {}
        consumer = threading.Thread(target=lambda: got.update(first=sess.run(dequeue)))
        consumer.start()  # blocks: the queue is empty
        for i in range(3):
            sess.run(enqueue, {value: [i, -i], index: i})
        consumer.join(timeout=10)
        np.testing.assert_array_equal(got["first"][0], [[0, 0], [1, -1]])
        assert got["first"][1].tolist() == [0, 1] and sess.run(queue.size()) == 1
        sess.run(close)
        with pytest.raises(tf.errors.CancelledError, match="closed"):
            sess.run(enqueue, {value: [0, 0], index: 9})
        with pytest.raises(tf.errors.OutOfRangeError, match="requested 2, current size 1"):
            sess.run(dequeue)
        values, indices = sess.run(queue.dequeue())  # what is left still comes out
        assert indices == 2


def test_random_shuffle_queue_keeps_min_after_dequeue_and_mixes():
    queue = tf.RandomShuffleQueue(capacity=100, min_after_dequeue=20, dtypes=tf.int32, shapes=[[]], seed=5)
    fill = queue.enqueue_many([tf.range(50)])
    take = queue.dequeue_many(10)
    with tf.Session() as sess:
        sess.run(fill)
        taken = np.concatenate([sess.run(take) for _ in range(3)])
        assert sess.run(queue.size()) == 20
        assert len(set(taken.tolist())) == 30 and taken.tolist() != sorted(taken.tolist())


def test_a_dequeue_waits_until_its_deadline_then_says_why():
    queue = tf.FIFOQueue(2, tf.float32, shapes=[[]])
    config = tf.ConfigProto(operation_timeout_in_ms=300)
    with tf.Session(config=config) as sess:
        with pytest.raises(tf.errors.DeadlineExceededError, match="start_queue_runners"):
            sess.run(queue.dequeue())


def test_an_enqueue_waits_for_room_past_the_deadline():
    """A producer ahead of training (a full filename queue) waits as long as it takes."""
    queue = tf.FIFOQueue(1, tf.int32, shapes=[[]])
    enqueue = queue.enqueue(tf.constant(7))
    with tf.Session(config=tf.ConfigProto(operation_timeout_in_ms=100)) as sess:
        sess.run(enqueue)
        producer = threading.Thread(target=sess.run, args=(enqueue,))
        producer.start()
        producer.join(timeout=0.5)  # five deadlines later it still waits for room, without an error
        assert producer.is_alive()
        assert [sess.run(queue.dequeue()) for _ in range(2)] == [7, 7]
        producer.join(timeout=10)
        assert not producer.is_alive()


def test_request_stop_cancels_blocked_enqueues_and_join_returns():
    queue = tf.FIFOQueue(2, tf.int32, shapes=[[]])
    runner = tf.train.QueueRunner(queue, [queue.enqueue(tf.constant(1))] * 2)
    tf.train.add_queue_runner(runner)
    with tf.Session() as sess:
        coord = tf.train.Coordinator()
        threads = tf.train.start_queue_runners(sess, coord)
        assert sess.run(queue.dequeue()) == 1
        coord.request_stop()
        coord.join(threads, stop_grace_period_secs=10)  # raises if a thread were still running
        assert not runner.exceptions_raised


def test_queue_runners_refuse_cluster_sessions_with_a_clear_error():
    queue = tf.FIFOQueue(2, tf.int32, shapes=[[]])
    runner = tf.train.QueueRunner(queue, [queue.enqueue(tf.constant(1))])

    class ClusterSession:  # what a Session(cluster.target) looks like to the runner
        runner = object()  # not a LocalRunner

    with pytest.raises(NotImplementedError, match="local sessions only"):
        runner.create_threads(ClusterSession())


def small_cnn(images, num_classes: int = 4):
    with tf.variable_scope("conv1"):
        kernel = tf.get_variable("weights", [5, 5, 3, 8],
                                 initializer=tf.truncated_normal_initializer(stddev=0.1))
        biases = tf.get_variable("biases", [8], initializer=tf.zeros_initializer())
        conv = tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(images, kernel, [1, 1, 1, 1], "SAME"), biases))
    pool = tf.nn.max_pool(conv, [1, 3, 3, 1], [1, 4, 4, 1], "SAME")
    flat = tf.reshape(pool, [-1, 6 * 6 * 8])
    with tf.variable_scope("softmax_linear"):
        weights = tf.get_variable("weights", [6 * 6 * 8, num_classes],
                                  initializer=tf.truncated_normal_initializer(stddev=0.05))
        biases = tf.get_variable("biases", [num_classes], initializer=tf.zeros_initializer())
        return tf.matmul(flat, weights) + biases


def test_a_small_cnn_trains_on_the_queue_input_and_evaluates_from_its_checkpoint(cifar, tmp_path):
    """cifar10_train.py's shape (distorted shuffle_batch, MonitoredTrainingSession with a checkpoint
    dir) then cifar10_eval.py's (a new graph, batch of undistorted test images, Saver restore,
    in_top_k precision)."""
    data_dir, _ = cifar
    train_dir, batch_size = str(tmp_path / "train"), 16
    with tf.Graph().as_default():
        step = tf.train.get_or_create_global_step()
        files = [os.path.join(data_dir, name) for name in TRAIN_FILES]
        _, label, image = read_cifar10(tf.train.string_input_producer(files))
        float_image = distorted(image)
        float_image.set_shape([CROP, CROP, 3])
        label.set_shape([1])
        images, labels = tf.train.shuffle_batch([float_image, label], batch_size, num_threads=2,
                                                capacity=80 + 3 * batch_size, min_after_dequeue=80)
        labels = tf.reshape(labels, [batch_size])
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels,
                                                                             logits=small_cnn(images)))
        train_op = tf.train.AdamOptimizer(0.01).minimize(loss, global_step=step)
        losses = []
        with tf.train.MonitoredTrainingSession(checkpoint_dir=train_dir,
                                               hooks=[tf.train.StopAtStepHook(last_step=60)]) as sess:
            while not sess.should_stop():
                losses.append(sess.run([train_op, loss])[1])
    assert np.mean(losses[-10:]) < 0.5 * np.mean(losses[:5]), losses

    with tf.Graph().as_default():
        test_files = [os.path.join(data_dir, "test_batch.bin")]
        _, label, image = read_cifar10(tf.train.string_input_producer(test_files))
        float_image = tf.image.per_image_standardization(
            tf.image.resize_image_with_crop_or_pad(tf.cast(image, tf.float32), CROP, CROP))
        float_image.set_shape([CROP, CROP, 3])
        label.set_shape([1])
        images, labels = tf.train.batch([float_image, label], batch_size=10, num_threads=2)
        top_k_op = tf.nn.in_top_k(small_cnn(images), tf.reshape(labels, [10]), 1)
        saver = tf.train.Saver()
        with tf.Session() as sess:
            saver.restore(sess, tf.train.latest_checkpoint(train_dir))
            coord = tf.train.Coordinator()
            threads = tf.train.start_queue_runners(sess, coord)
            correct = sum(int(np.sum(sess.run(top_k_op))) for _ in range(4))
            coord.request_stop()
            coord.join(threads, stop_grace_period_secs=10)
    assert correct / 40 >= 0.8  # 4 colours: chance is 0.25


def test_text_lines_through_decode_csv(tmp_path):
    """The CSV pattern: TextLineReader(skip_header_lines=1) -> decode_csv -> batch."""
    rows = [(5.1, 3, "setosa"), (6.2, 1, "virginica"), (4.9, 0, "setosa, maybe")]
    path = tmp_path / "iris.csv"
    path.write_text("length,count,name\n" + "".join(f'{a},{b},"{c}"\n' for a, b, c in rows))
    files = tf.train.string_input_producer([str(path)], num_epochs=1, shuffle=False)
    key, line = tf.TextLineReader(skip_header_lines=1).read(files)
    length, count, name = tf.decode_csv(line, record_defaults=[[0.0], [0], [""]])
    batch = tf.train.batch([key, length, count, name], batch_size=3)
    with tf.Session() as sess:
        sess.run(tf.local_variables_initializer())
        coord = tf.train.Coordinator()
        threads = tf.train.start_queue_runners(sess, coord)
        keys, lengths, counts, names = sess.run(batch)
        with pytest.raises(tf.errors.OutOfRangeError):
            sess.run(batch)
        coord.request_stop()
        coord.join(threads)
    assert keys.tolist() == [f"{path}:{i}".encode() for i in (2, 3, 4)]
    np.testing.assert_allclose(lengths, [5.1, 6.2, 4.9], rtol=1e-6)
    assert counts.dtype == np.int32 and counts.tolist() == [3, 1, 0]
    assert names.tolist() == [b"setosa", b"virginica", b"setosa, maybe"]


def test_decode_csv_fills_defaults_and_names_bad_fields():
    lines = tf.placeholder(tf.string, [None])
    a, b = tf.decode_csv(lines, record_defaults=[[], [7]])
    with tf.Session() as sess:
        got_a, got_b = sess.run([a, b], {lines: [b"1.5,", b"2,3"]})
        assert got_a.tolist() == [1.5, 2.0] and got_b.tolist() == [7, 3]
        with pytest.raises(tf.errors.InvalidArgumentError, match="required field is missing"):
            sess.run(a, {lines: [b",1"]})
        with pytest.raises(tf.errors.InvalidArgumentError, match="'x' .* is not a int32"):
            sess.run(b, {lines: [b"1,x"]})


def test_whole_files_as_records(tmp_path):
    for i in range(3):
        (tmp_path / f"part{i}.txt").write_bytes(b"file %d" % i)
    names = sorted(str(p) for p in tmp_path.glob("part*.txt"))
    key, value = tf.WholeFileReader().read(tf.train.string_input_producer(names, num_epochs=1, shuffle=False))
    with tf.Session() as sess:
        sess.run(tf.local_variables_initializer())
        coord = tf.train.Coordinator()
        threads = tf.train.start_queue_runners(sess, coord)
        records = drain(sess, [key, value])
        coord.request_stop()
        coord.join(threads)
    assert [(k.decode(), v) for k, v in records] == [(n, b"file %d" % i) for i, n in enumerate(names)]


def test_concurrent_runs_of_one_session_each_count():
    """Queue runners run steps beside the training loop: runs from many threads, one session."""
    counter = tf.Variable(0, name="counter")
    bump = tf.assign_add(counter, 1)
    noise = tf.reduce_sum(tf.random_normal([100]))
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())

        def work():
            for _ in range(200):
                sess.run([bump, noise])

        threads = [threading.Thread(target=work) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert sess.run(counter) == 800


def test_slice_input_producer_keeps_rows_together_for_each_epoch():
    features = np.arange(30, dtype=np.float32).reshape(10, 3)
    labels = np.arange(10, dtype=np.int64) * 7
    feature, label = tf.train.slice_input_producer([features, labels], num_epochs=3, shuffle=True, seed=1)
    assert feature.shape.as_list() == [3] and label.dtype == tf.int64
    batch_features, batch_labels = tf.train.batch([feature, label], batch_size=5)
    with tf.Session() as sess:
        sess.run(tf.local_variables_initializer())
        coord = tf.train.Coordinator()
        threads = tf.train.start_queue_runners(sess, coord)
        batches = drain(sess, [batch_features, batch_labels])
        coord.request_stop()
        coord.join(threads)
    rows = np.concatenate([f for f, _ in batches]), np.concatenate([lab for _, lab in batches])
    assert len(rows[1]) == 30
    np.testing.assert_array_equal(rows[0][:, 0] / 3 * 7, rows[1])  # each label beside its own row
    epochs = [sorted(rows[1][i:i + 10].tolist()) for i in (0, 10, 20)]
    assert epochs == [labels.tolist()] * 3 and rows[1][:10].tolist() != labels.tolist()


def test_queue_runners_take_any_coordinator_with_tf_s_methods():
    """A Supervisor's coordinator is not a tf.train.Coordinator: its stop still cancels the queue."""

    class StopFlag:  # only what TF documents of a coordinator
        def __init__(self):
            self.event, self.threads = threading.Event(), []

        def should_stop(self):
            return self.event.is_set()

        def request_stop(self, ex=None):
            self.event.set()

        def wait_for_stop(self, timeout=None):
            return self.event.wait(timeout)

        def register_thread(self, thread):
            self.threads.append(thread)

    queue = tf.FIFOQueue(2, tf.int32, shapes=[[]])
    runner = tf.train.QueueRunner(queue, [queue.enqueue(tf.constant(3))])
    with tf.Session(config=tf.ConfigProto(operation_timeout_in_ms=5000)) as sess:
        stop = StopFlag()
        threads = runner.create_threads(sess, coord=stop, daemon=True, start=True)
        assert sess.run(queue.dequeue()) == 3
        stop.request_stop()  # the runner may be blocked on the full queue: the stop must cancel it
        for thread in threads:
            thread.join(timeout=10)
        assert not any(t.is_alive() for t in threads) and len(stop.threads) == 2
        with pytest.raises(tf.errors.OutOfRangeError):  # closed (not a 5 s deadline): the stop closed it
            sess.run(queue.dequeue_many(3))


# ---- slim's prefetch_queue and the multi-GPU tutorial's towers -----------------------------------
def _tower_loss(images, labels):
    """A small shared-weights model, built once per tower under variable_scope reuse."""
    weights = tf.get_variable("weights", [CROP * CROP * 3, len(COLORS)],
                              initializer=tf.truncated_normal_initializer(stddev=0.01))
    biases = tf.get_variable("biases", [len(COLORS)], initializer=tf.constant_initializer(0.0))
    logits = tf.matmul(tf.reshape(images, [-1, CROP * CROP * 3]), weights) + biases
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))


def _average_gradients(tower_grads):
    averaged = []
    for grad_and_vars in zip(*tower_grads):
        grads = tf.concat(axis=0, values=[tf.expand_dims(g, 0) for g, _ in grad_and_vars])
        averaged.append((tf.reduce_mean(grads, 0), grad_and_vars[0][1]))
    return averaged


def test_prefetch_queue_feeds_towers_that_share_variables_and_average_gradients(cifar):
    """cifar10_multi_gpu_train.py's shape: batches prefetched into slim's queue, one dequeue per
    tower under tf.device('/gpu:%d') (soft placement on a machine without GPUs), averaged gradients."""
    data_dir, contents = cifar
    num_towers, batch_size, lr = 2, 8, 0.1
    with tf.device("/cpu:0"):
        files = [os.path.join(data_dir, name) for name in TRAIN_FILES]
        key, label, image = read_cifar10(tf.train.string_input_producer(files, seed=1))
        image = tf.random_crop(tf.cast(image, tf.float32), [CROP, CROP, 3]) / 255.0
        keys, images, labels = tf.train.batch([key, image, tf.reshape(label, [])], batch_size=batch_size)
        batch_queue = tf.contrib.slim.prefetch_queue.prefetch_queue([keys, images, labels],
                                                                    capacity=2 * num_towers)
        opt = tf.train.GradientDescentOptimizer(lr)
        tower_grads, tower_keys, tower_labels = [], [], []
        with tf.variable_scope(tf.get_variable_scope()):
            for i in range(num_towers):
                with tf.device(f"/gpu:{i}"), tf.name_scope(f"tower_{i}"):
                    key_batch, image_batch, label_batch = batch_queue.dequeue()
                    loss = _tower_loss(image_batch, label_batch)
                    tf.get_variable_scope().reuse_variables()
                    tower_grads.append(opt.compute_gradients(loss))
                    tower_keys.append(key_batch)
                    tower_labels.append(label_batch)
        grads = _average_gradients(tower_grads)
        train_op = opt.apply_gradients(grads)
    assert [v.op.name for v in tf.trainable_variables()] == ["weights", "biases"]
    assert any(s.op.name.endswith("fraction_of_4_full") for s in tf.get_collection(tf.GraphKeys.SUMMARIES))
    weights = tf.trainable_variables()[0]
    config = tf.ConfigProto(allow_soft_placement=True, log_device_placement=False)
    with tf.Session(config=config) as sess:
        sess.run(tf.global_variables_initializer())
        coord = tf.train.Coordinator()
        threads = tf.train.start_queue_runners(sess=sess, coord=coord)
        seen = set()
        for _ in range(3):
            before = sess.run(weights)
            _, got_keys, got_labels, (avg_grad, _) = sess.run([train_op, tower_keys, tower_labels, grads[0]])
            np.testing.assert_allclose(sess.run(weights), before - lr * avg_grad, rtol=1e-5, atol=1e-7)
            for k_batch, l_batch in zip(got_keys, got_labels):
                assert [record_of(contents, k)[0] for k in k_batch] == l_batch.tolist()
            batch_keys = [k for k_batch in got_keys for k in k_batch.tolist()]
            assert len(set(batch_keys)) == num_towers * batch_size  # each tower dequeued its own batch
            seen.update(batch_keys)
        coord.request_stop()
        coord.join(threads, stop_grace_period_secs=10)
    assert len(seen) == 3 * num_towers * batch_size


def test_prefetch_queue_of_a_dict_and_what_it_refuses():
    features = {"x": tf.ones([2, 3]), "y": tf.range(2)}
    queue = tf.contrib.slim.prefetch_queue.prefetch_queue(features, capacity=3, num_threads=2)
    got = queue.dequeue()
    assert sorted(got) == ["x", "y"] and got["x"].shape.as_list() == [2, 3]
    with tf.Session() as sess:
        coord = tf.train.Coordinator()
        threads = tf.train.start_queue_runners(sess=sess, coord=coord)
        assert sess.run(got["y"]).tolist() == [0, 1]
        coord.request_stop()
        coord.join(threads, stop_grace_period_secs=10)
    with pytest.raises(ValueError, match="fully defined shapes.*set_shape"):
        tf.contrib.slim.prefetch_queue.prefetch_queue([tf.placeholder(tf.float32, [None, 3])])
    with pytest.raises(ValueError, match=r"dynamic_pad=True\) is not supported by dflow"):
        tf.contrib.slim.prefetch_queue.prefetch_queue([tf.ones([2])], dynamic_pad=True)


def _runner_of_copies():
    queue = tf.FIFOQueue(1000, [tf.int32], shapes=[[]])
    counter = tf.Variable(0, name="counter")
    copies = queue.enqueue([counter.assign_add(1)])
    other = queue.enqueue([tf.constant(-1)])
    return queue, counter, tf.train.QueueRunner(queue, [copies] * 16 + [other])


@pytest.mark.parametrize("setting, threads", [(None, 2), ("3", 4), ("16", 17), ("40", 17)])
def test_copies_of_one_enqueue_op_run_on_one_thread_unless_set(monkeypatch, setting, threads):
    """shuffle_batch(num_threads=16)'s sixteen copies: one thread (the interpreter's lock made
    sixteen slower), or DFLOW_QUEUE_RUNNER_THREADS of them; each distinct op keeps its own."""
    if setting is None:
        monkeypatch.delenv("DFLOW_QUEUE_RUNNER_THREADS", raising=False)
    else:
        monkeypatch.setenv("DFLOW_QUEUE_RUNNER_THREADS", setting)
    with tf.Graph().as_default():
        queue, counter, runner = _runner_of_copies()
        take = queue.dequeue_many(200)
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            coord = tf.train.Coordinator()
            started = runner.create_threads(sess, coord=coord, start=True)
            workers = [t for t in started if not t.name.endswith("close_on_stop")]
            assert len(workers) == threads
            values = []  # on a loaded machine the -1 thread may fill whole batches first: take until
            for _ in range(50):  # the counting ones have run too (each of 50 batches is 200 values)
                values += sess.run(take).tolist()
                if any(v != -1 for v in values):
                    break
            coord.request_stop()
            coord.join(started, stop_grace_period_secs=10)
    counted = [v for v in values if v != -1]
    assert counted and len(set(counted)) == len(counted) and min(counted) >= 1  # each count once


@pytest.mark.parametrize("setting", ["0", "many", "-2"])
def test_a_bad_queue_runner_threads_setting_is_refused(monkeypatch, setting):
    monkeypatch.setenv("DFLOW_QUEUE_RUNNER_THREADS", setting)
    with tf.Graph().as_default():
        _, _, runner = _runner_of_copies()
        with tf.Session() as sess, pytest.raises(ValueError, match=f"DFLOW_QUEUE_RUNNER_THREADS='{setting}'"):
            runner.create_threads(sess)
