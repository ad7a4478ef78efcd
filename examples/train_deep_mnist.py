"""Train the Deep MNIST CNN on scikit-learn's handwritten digits, TF 1.x style.

The graph, the session loop and the evaluation are those of TensorFlow's
"Deep MNIST for Experts"; only the data differ: the 1,797 8x8 digits bundled
with scikit-learn (no download), upsampled to 28x28. ``dflow train --model
deep_mnist`` does the same with progress lines and checkpoints.

    $ python examples/train_deep_mnist.py [--steps 600] [--data_format NCHW]
"""
import argparse
import time

import dflow as tf
from dflow.data import iterate_batches, load_digits
from dflow.models import deep_mnist

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=600)
parser.add_argument("--batch_size", type=int, default=50)
parser.add_argument("--data_format", default="NHWC", choices=["NHWC", "NCHW"])
FLAGS = parser.parse_args()

train_x, train_y, test_x, test_y = load_digits((28, 28, 1))

graph = tf.Graph()
with graph.as_default():
    graph.seed = 0
    x = tf.placeholder(tf.float32, [None, 28, 28, 1], name="x")
    y_ = tf.placeholder(tf.int64, [None], name="y_")
    keep_prob = tf.placeholder(tf.float32, [], name="keep_prob")

    y_conv = deep_mnist.deep_mnist(x, keep_prob, data_format=FLAGS.data_format)
    cross_entropy = tf.reduce_mean(
        tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y_, logits=y_conv))
    train_step = tf.train.AdamOptimizer(1e-3).minimize(cross_entropy)
    correct_prediction = tf.equal(tf.argmax(y_conv, 1), y_)
    accuracy = tf.reduce_mean(tf.cast(correct_prediction, tf.float32))

with tf.Session(graph=graph) as sess:
    sess.run(tf.global_variables_initializer())
    batches = iterate_batches(train_x, train_y, FLAGS.batch_size, seed=0)
    start = time.time()
    for i in range(1, FLAGS.steps + 1):
        batch_x, batch_y = next(batches)
        if i % 100 == 0:
            train_accuracy = sess.run(accuracy, {x: batch_x, y_: batch_y, keep_prob: 1.0})
            print(f"step {i}, training accuracy {train_accuracy:g} ({time.time() - start:.0f} s)")
        sess.run(train_step, {x: batch_x, y_: batch_y, keep_prob: 0.5})

    test_accuracy = sess.run(accuracy, {x: test_x, y_: test_y, keep_prob: 1.0})
    print(f"test accuracy {test_accuracy:g}")
