"""Between-graph replication, written like Listing 2 of the seed (001, "Distributed
TensorFlow skeleton"): every worker runs the same program, places the variables on
the PS tasks with ``replica_device_setter``, trains on its own shard of the data
and shares the model through the PS.

Here the program is a function, and ``tf.replicate`` runs it once per worker task of
an embedded cluster (1 PS + 2 workers by default), each as its own client inside its
worker process; with ``dflow worker`` processes on several machines and
``tf.cluster.connect(ADDRESS)`` the same function runs across them.

    $ python examples/between_graph.py [--ps 1] [--workers 2] [--steps 300] [--sync]
"""
import argparse

import numpy as np

import dflow as tf
from dflow.data import iterate_batches, load_digits
from dflow.models import mnist_dnn


def train(task_index, target, cluster, flags):
    """The worker branch of Listing 2; returns (steps run here, test accuracy, staleness)."""
    train_x, train_y, test_x, test_y = load_digits((784,))
    shard = slice(task_index, None, flags.workers)  # each worker reads its own examples
    with tf.device(tf.train.replica_device_setter(
            worker_device=f"/job:worker/task:{task_index}", cluster=cluster)):
        # Build your model here as if you only were using a single machine
        x = tf.placeholder(tf.float32, [None, 784], name="x")
        y_ = tf.placeholder(tf.int64, [None], name="y_")
        logits = mnist_dnn.mnist_dnn(x)
        loss = mnist_dnn.loss(logits, y_)
        step = tf.train.get_or_create_global_step()
        optimizer = tf.train.AdamOptimizer(1e-3)
        if flags.sync:
            optimizer = tf.train.SyncReplicasOptimizer(optimizer, replicas_to_aggregate=flags.workers,
                                                       total_num_replicas=flags.workers)
        train_op = optimizer.minimize(loss, global_step=step)
        accuracy = tf.reduce_mean(tf.cast(tf.equal(tf.argmax(logits, 1), y_), tf.float32))

    # Train your model here: task 0 initializes the PS variables, the others wait for it
    hooks = [tf.train.StopAtStepHook(last_step=flags.steps)]
    if flags.sync:  # the chief's queue runner releases the replicas at each step
        hooks.append(optimizer.make_session_run_hook(is_chief=task_index == 0))
    steps, staleness = 0, []
    with tf.train.MonitoredTrainingSession(target, is_chief=task_index == 0, hooks=hooks) as sess:
        for xs, ys in iterate_batches(train_x[shard], train_y[shard], flags.batch_size, seed=task_index):
            if sess.should_stop():
                break
            sess.run(train_op, {x: xs, y_: ys})
            steps += 1
            staleness.append(sess.last_run_stats.staleness or 0)
        test_accuracy = float(sess.run(accuracy, {x: test_x, y_: test_y}))
    return steps, test_accuracy, staleness


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ps", type=int, default=1)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--steps", type=int, default=300, help="global steps, all workers together")
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--sync", action="store_true", help="SyncReplicasOptimizer instead of async")
    flags = parser.parse_args()
    with tf.cluster.local(ps=flags.ps, workers=flags.workers) as cluster:
        print(f"cluster: {cluster.spec.as_dict()}  dashboard: {cluster.dashboard_link}")
        results = tf.replicate(train, cluster, cluster.target, cluster.spec, flags)
    for task, (steps, accuracy, staleness) in enumerate(results):
        print(f"worker {task}: {steps} steps, test accuracy {accuracy:.4f}, "
              f"staleness mean {np.mean(staleness):.2f} max {max(staleness)}")


if __name__ == "__main__":
    main()
