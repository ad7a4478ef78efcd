"""In-graph replication: one client builds one graph with a model replica per worker
task (seed 000's first strategy). Each replica computes the gradients of its slice of
the batch on its own worker; the PS averages them and applies the update once.

    $ python examples/in_graph.py [--workers 2] [--steps 300]
"""
import argparse
import time

import dflow as tf
from dflow.data import iterate_batches, load_digits
from dflow.models import mnist_dnn


def build(num_workers: int, batch_size: int, learning_rate: float):
    """The replicated graph: (x, y_, train_op, accuracy, test_x, test_y_)."""
    x = tf.placeholder(tf.float32, [batch_size, 784], name="x")  # split needs the batch size
    y_ = tf.placeholder(tf.int64, [batch_size], name="y_")
    optimizer = tf.train.AdamOptimizer(learning_rate)
    step = tf.train.get_or_create_global_step()
    xs, ys = tf.split(x, num_workers), tf.split(y_, num_workers)
    tower_grads = []
    for i in range(num_workers):
        # variables on the PS, shared by every replica (reuse); compute on worker i
        with tf.device(tf.train.replica_device_setter(ps_tasks=1, worker_device=f"/job:worker/task:{i}")), \
                tf.variable_scope("model", reuse=i > 0):
            loss = mnist_dnn.loss(mnist_dnn.mnist_dnn(xs[i]), ys[i])
            tower_grads.append(optimizer.compute_gradients(loss))
    with tf.device("/job:ps/task:0"):
        averaged = [(tf.add_n([grads[k][0] for grads in tower_grads]) / float(num_workers), var)
                    for k, (_, var) in enumerate(tower_grads[0])]
        train_op = optimizer.apply_gradients(averaged, global_step=step)
    with tf.device("/job:worker/task:0"), tf.variable_scope("model", reuse=True):
        test_x = tf.placeholder(tf.float32, [None, 784], name="test_x")
        test_y_ = tf.placeholder(tf.int64, [None], name="test_y_")
        logits = mnist_dnn.mnist_dnn(test_x)
        accuracy = tf.reduce_mean(tf.cast(tf.equal(tf.argmax(logits, 1), test_y_), tf.float32))
    return x, y_, train_op, accuracy, test_x, test_y_


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch_size", type=int, default=64, help="global batch, split over the workers")
    flags = parser.parse_args()
    train_x, train_y, test_x, test_y = load_digits((784,))
    with tf.cluster.local(ps=1, workers=flags.workers) as cluster:
        x, y_, train_op, accuracy, test_x_, test_y_ = build(flags.workers, flags.batch_size, 1e-3)
        with tf.Session(cluster.target) as sess:
            sess.run(tf.global_variables_initializer())
            batches = iterate_batches(train_x, train_y, flags.batch_size)
            start = time.perf_counter()
            for step in range(1, flags.steps + 1):
                xs, ys = next(batches)
                sess.run(train_op, {x: xs, y_: ys})
                if step % 100 == 0:
                    rate = step * flags.batch_size / (time.perf_counter() - start)
                    print(f"step {step}  images/sec {rate:.0f}")
            print(f"test accuracy {sess.run(accuracy, {test_x_: test_x, test_y_: test_y}):.4f}")
            print(sess.describe_placement(train_op, {x: xs, y_: ys}).splitlines()[-1])


if __name__ == "__main__":
    main()
