"""``MonitoredTrainingSession`` recovers from a lost session as TF 1.x's does: on AbortedError or
UnavailableError it closes the session, makes a new one (the chief restores the latest checkpoint),
and runs the call again, so the training loop reaches its step budget.

The fast tests make a step fail from a hook; the slow one SIGKILLs the PS process of a real
cluster mid-training (it comes back at a new address with none of its variables) and measures the
seconds to recover and the steps lost. `-s` prints the numbers.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
import traceback

import numpy as np
import pytest

import dflow as tf

CHECKPOINT_EVERY = 5


class AbortOnceAtStep(tf.train.SessionRunHook):
    """Fails the run that would take the global step past ``step``, the first ``times`` times."""

    def __init__(self, step: int, error=tf.errors.AbortedError, times: int = 1):
        self.step, self.error, self.left = step, error, times

    def begin(self):
        self._global_step = tf.train.get_global_step()

    def before_run(self, run_context):
        if self.left and int(run_context.session.run(self._global_step)) == self.step:
            self.left -= 1
            raise self.error(f"step {self.step} aborted by the test")
        return None


def build_counter():
    step = tf.train.get_or_create_global_step()
    total = tf.Variable(tf.zeros([3]), name="total")
    train_op = tf.group(tf.assign_add(total, tf.ones([3])), tf.assign_add(step, 1))
    return step, total, train_op


def test_an_aborted_step_restores_the_latest_checkpoint_and_the_loop_goes_on(tmp_path, caplog):
    step, total, train_op = build_counter()
    hooks = [tf.train.StopAtStepHook(last_step=20), AbortOnceAtStep(8)]
    runs = 0
    with caplog.at_level(logging.WARNING, logger="dflow"):
        with tf.train.MonitoredTrainingSession(checkpoint_dir=str(tmp_path), hooks=hooks,
                                               save_checkpoint_steps=CHECKPOINT_EVERY) as sess:
            while not sess.should_stop():
                sess.run(train_op)
                runs += 1
            final_total = sess.run(total)
            recoveries = sess.recoveries
    assert len(recoveries) == 1
    recovery = recoveries[0]
    # saved at steps 0, 5, 10, ...: the latest before step 8 is step 5
    assert recovery.step_restored == 5 and recovery.checkpoint.endswith("model.ckpt-5")
    assert recovery.step_reached == 8 and recovery.steps_lost == 3 <= CHECKPOINT_EVERY
    assert "AbortedError" in recovery.error
    assert runs == 20 + recovery.steps_lost  # the lost steps ran twice; the failed call was run again
    np.testing.assert_array_equal(final_total, [20, 20, 20])  # restored with the step: consistent
    assert tf.train.latest_checkpoint(str(tmp_path)).endswith("model.ckpt-20")
    lines = [r.getMessage() for r in caplog.records if "recovery 1/3" in r.getMessage()]
    assert len(lines) == 1 and "model.ckpt-5 (step 5)" in lines[0] and "3 steps lost" in lines[0], lines


def test_without_a_checkpoint_the_chief_initializes_again(tmp_path):
    step, total, train_op = build_counter()
    hooks = [tf.train.StopAtStepHook(last_step=5), AbortOnceAtStep(3, tf.errors.UnavailableError)]
    with tf.train.MonitoredTrainingSession(hooks=hooks) as sess:
        while not sess.should_stop():
            sess.run(train_op)
        assert int(sess.run(step)) == 5
        (recovery,) = sess.recoveries
    assert recovery.checkpoint is None and recovery.step_restored == 0 and recovery.steps_lost == 3


def test_recoveries_are_bounded_by_max_recoveries(tmp_path):
    _, _, train_op = build_counter()
    hooks = [AbortOnceAtStep(2, times=10)]
    with pytest.raises(tf.errors.AbortedError, match="step 2 aborted"):
        with tf.train.MonitoredTrainingSession(checkpoint_dir=str(tmp_path), save_checkpoint_steps=1,
                                               hooks=hooks, max_recoveries=2) as sess:
            while not sess.should_stop():
                sess.run(train_op)
    assert len(sess.recoveries) == 2
    assert hooks[0].left == 10 - 3  # two recovered, the third raised


def test_max_recoveries_zero_raises_the_first_error_and_other_errors_are_not_recovered():
    _, _, train_op = build_counter()
    with tf.train.MonitoredTrainingSession(hooks=[AbortOnceAtStep(1)], max_recoveries=0) as sess:
        sess.run(train_op)
        with pytest.raises(tf.errors.AbortedError):
            sess.run(train_op)
    invalid = AbortOnceAtStep(0, tf.errors.InvalidArgumentError)
    with tf.train.MonitoredTrainingSession(hooks=[invalid]) as sess:
        with pytest.raises(tf.errors.InvalidArgumentError):
            sess.run(train_op)
        assert sess.recoveries == []
    with pytest.raises(ValueError, match="max_recoveries >= 0"):
        tf.train.MonitoredTrainingSession(max_recoveries=-1)


class LostForGood(AbortOnceAtStep):
    """Fails step 2, and then every new session, as a task that never comes back would."""

    def __init__(self):
        super().__init__(2, tf.errors.UnavailableError)
        self.sessions = 0

    def after_create_session(self, session, coord):
        self.sessions += 1
        if self.sessions > 1:
            raise tf.errors.UnavailableError("ps/0 is not back yet")


def test_a_task_that_never_comes_back_fails_after_recovery_timeout_secs():
    _, _, train_op = build_counter()
    hook = LostForGood()
    with tf.train.MonitoredTrainingSession(hooks=[hook], recovery_timeout_secs=0.5) as sess:
        began = time.monotonic()
        expected = (r"could not replace its session within recovery_timeout_secs=0.5 s after "
                    r"UnavailableError: step 2 aborted.*not back yet")
        with pytest.raises(tf.errors.UnavailableError, match=expected):
            while not sess.should_stop():
                sess.run(train_op)
        took = time.monotonic() - began
    assert hook.sessions >= 3 and took < 5, (hook.sessions, took)  # tried again, with a deadline


# ---- a real cluster: the PS process SIGKILLed mid-training -------------------------------------------
def test_a_killed_ps_is_recovered_and_training_reaches_its_step_budget(tmp_path, caplog):
    last_step, every, kill_at = 120, 20, 50
    with tf.cluster.local(ps=1, workers=1) as cluster:
        ps_process = cluster.dask_cluster.workers["ps/0"]
        ps_address = cluster.spec.as_dict()["ps"][0]
        with tf.device(tf.train.replica_device_setter(cluster=cluster.spec)):  # variables on ps/0
            step, total, train_op = build_counter()
        hooks = [tf.train.StopAtStepHook(last_step=last_step)]
        killed_at = restored_from = None
        with caplog.at_level(logging.WARNING, logger="dflow"):
            with tf.train.MonitoredTrainingSession(master=cluster.target, checkpoint_dir=str(tmp_path),
                                                   save_checkpoint_steps=every, hooks=hooks) as sess:
                while not sess.should_stop():
                    reached = int(sess.run([train_op, step])[1])
                    if killed_at is not None and not sess.recoveries:
                        pytest.fail(f"step {reached} ran on the killed PS without a recovery")
                    if reached == kill_at and killed_at is None:  # an event: the step, not a time
                        restored_from = tf.train.latest_checkpoint(str(tmp_path))
                        os.kill(ps_process.process.pid, signal.SIGKILL)
                        killed_at = time.monotonic()
                        # the first run after the kill fails, recovers and is run again
                        reached = int(sess.run([train_op, step])[1])
                        back_at = time.monotonic()
                final_step, final_total = int(sess.run(step)), sess.run(total)
                recoveries = sess.recoveries
        assert killed_at is not None
        assert len(ps_process.deaths) == 1 and cluster.spec.as_dict()["ps"][0] != ps_address  # came back
    assert final_step == last_step
    np.testing.assert_array_equal(final_total, [last_step] * 3)  # the PS's variables restored together
    (recovery,) = recoveries
    assert "UnavailableError" in recovery.error and "ps" in recovery.error, recovery.error
    assert recovery.checkpoint == restored_from, (recovery.checkpoint, restored_from)
    assert recovery.step_restored == int(restored_from.rpartition("-")[2])
    assert recovery.step_reached == kill_at
    assert 0 < recovery.steps_lost <= every, recovery
    assert [r.getMessage() for r in caplog.records if "recovery 1/3 from UnavailableError" in r.getMessage()]
    print(f"\nRECOVERY kill ps/0 under MonitoredTrainingSession: recover_s {recovery.seconds:.1f} "
          f"(kill to next step {back_at - killed_at:.1f} s), restored step {recovery.step_restored}, "
          f"steps lost {recovery.steps_lost}")


def test_between_graph_replicas_both_recover_a_killed_ps_the_non_chief_waiting_for_the_chief(tmp_path):
    """Two replicas (threads, a graph each, as two worker processes would be): the chief restores
    the checkpoint onto the new PS, the other waits until its variables are ready, then both go on."""
    last_step, every, kill_at = 150, 20, 50
    with tf.cluster.local(ps=1, workers=2) as cluster:
        ps_process = cluster.dask_cluster.workers["ps/0"]
        killed, done, back = threading.Event(), {}, {}
        killed_at = []

        def replica(task: int) -> None:
            with tf.Graph().as_default():
                device = tf.train.replica_device_setter(worker_device=f"/job:worker/task:{task}",
                                                        cluster=cluster.spec)
                with tf.device(device):
                    step, _, train_op = build_counter()
                with tf.train.MonitoredTrainingSession(
                        master=cluster.target, is_chief=task == 0, checkpoint_dir=str(tmp_path),
                        save_checkpoint_steps=every, hooks=[tf.train.StopAtStepHook(last_step=last_step)],
                        recovery_timeout_secs=120) as sess:
                    while not sess.should_stop():
                        reached = int(sess.run([train_op, step])[1])
                        if sess.recoveries and task not in back:
                            back[task] = time.monotonic()
                        if task == 0 and reached >= kill_at and not killed.is_set():
                            os.kill(ps_process.process.pid, signal.SIGKILL)
                            killed_at.append(time.monotonic())
                            killed.set()
                    done[task] = (int(sess.run(step)), sess.recoveries)

        errors = []

        def guarded(task: int) -> None:
            try:
                replica(task)
            except BaseException:  # noqa: BLE001 (reported by the test below)
                errors.append((task, traceback.format_exc()))

        threads = [threading.Thread(target=guarded, args=(task,), daemon=True) for task in (0, 1)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=240)
        assert not any(thread.is_alive() for thread in threads), "a replica still ran after 240 s"
        assert not errors, '\n'.join(f'replica {task}: {trace}' for task, trace in errors)
        assert killed.is_set() and len(ps_process.deaths) == 1
    for task in (0, 1):
        final_step, recoveries = done[task]
        assert final_step >= last_step
        assert len(recoveries) == 1 and "UnavailableError" in recoveries[0].error, (task, recoveries)
    chief, other = done[0][1][0], done[1][1][0]
    # at most one interval, plus the steps the other replica ran between two of the chief's runs
    # (0 when the chief saved just before the kill, at a step the other replica had advanced)
    assert chief.checkpoint is not None and 0 <= chief.steps_lost <= every + 5, chief
    assert other.checkpoint is None and other.step_restored >= chief.step_restored, other  # waited for it
    print(f"\nRECOVERY kill ps/0 under two replicas: kill to next step: chief {back[0] - killed_at[0]:.1f} s "
          f"(recovery {chief.seconds:.1f} s), steps lost {chief.steps_lost}; non-chief "
          f"{back[1] - killed_at[0]:.1f} s (recovery {other.seconds:.1f} s)")
