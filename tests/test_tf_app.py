"""tf.app, tf.flags, tf.logging, tf.gfile, tf.compat: the program shape of TF 1.x tutorials.

The scripts are written as the r1.x tutorials are (flags at module level, ``main(_)``,
``tf.app.run()``) and run as their users run them: ``python script.py --flag=value``.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import dflow as tf
from dflow.flags import _LazyFlagValues

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

FIT_SCRIPT = '''
"""Fits y = 3x + 1 by gradient descent; writes the weights to --log_dir."""
import os

import numpy as np
import dflow as tf

flags = tf.app.flags
flags.DEFINE_integer("max_steps", 200, "Number of steps to run trainer.")
flags.DEFINE_float("learning_rate", 0.1, "Initial learning rate.")
flags.DEFINE_string("log_dir", "/tmp/fit_logs", "Directory for the results.")
flags.DEFINE_boolean("verbose", True, "Log progress at INFO.")
tf.flags.DEFINE_enum("optimizer", "sgd", ["sgd", "momentum"], "Optimizer to use.")
tf.flags.DEFINE_list("tags", ["a", "b"], "Tags written with the result.")
tf.flags.DEFINE_multi_string("note", [], "Notes, repeatable.")
tf.flags.DEFINE_integer("exit_status", 0, "What main returns.")
FLAGS = flags.FLAGS

BATCH = 32 if FLAGS.max_steps > 10 else 8  # read at import time, as old scripts do


def train():
    x = tf.placeholder(tf.float32, [None])
    y = tf.placeholder(tf.float32, [None])
    w = tf.Variable(0.0)
    b = tf.Variable(0.0)
    loss = tf.reduce_mean(tf.square(w * x + b - y))
    if FLAGS.optimizer == "sgd":
        optimizer = tf.train.GradientDescentOptimizer(FLAGS.learning_rate)
    else:
        optimizer = tf.train.MomentumOptimizer(FLAGS.learning_rate, 0.9)
    train_op = optimizer.minimize(loss)
    rng = np.random.RandomState(0)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        for step in range(FLAGS.max_steps):
            xs = rng.uniform(-1, 1, BATCH)
            _, value = sess.run([train_op, loss], {x: xs, y: 3 * xs + 1})
            tf.logging.log_every_n(tf.logging.INFO, "step %d loss %.4f", 50, step, value)
        return sess.run([w, b])


def main(argv):
    if FLAGS.verbose:
        tf.logging.set_verbosity(tf.logging.INFO)
    if tf.gfile.Exists(FLAGS.log_dir):
        tf.gfile.DeleteRecursively(FLAGS.log_dir)
    tf.gfile.MakeDirs(FLAGS.log_dir)
    tf.logging.info("training for %d steps", FLAGS.max_steps)
    tf.logging.warn("batch %d", BATCH)
    weight, bias = train()
    with tf.gfile.GFile(os.path.join(FLAGS.log_dir, "result.txt"), "w") as f:
        f.write("%.3f %.3f %s %s\\n" % (weight, bias, ",".join(FLAGS.tags), ",".join(FLAGS.note)))
    print("unparsed:", argv[1:])
    return FLAGS.exit_status


if __name__ == "__main__":
    tf.app.run()
'''


@pytest.fixture(scope="module")
def fit_script(tmp_path_factory):
    path = tmp_path_factory.mktemp("scripts") / "fit.py"
    path.write_text(FIT_SCRIPT)
    return path


def run_script(script, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True,
                          timeout=120, env=env, cwd=os.path.dirname(script))


def test_script_runs_with_its_flags_and_gets_the_rest_in_argv(fit_script, tmp_path):
    log_dir = tmp_path / "logs"
    result = run_script(fit_script, "--max_steps=150", "--learning_rate", "0.2", f"--log_dir={log_dir}",
                        "--optimizer=momentum", "--tags=x,y", "--note", "one", "--note=two",
                        "data.txt", "--unknown_flag=1")
    assert result.returncode == 0, result.stderr
    assert "unparsed: ['data.txt', '--unknown_flag=1']" in result.stdout
    weight, bias, tags, notes = (log_dir / "result.txt").read_text().split()
    assert abs(float(weight) - 3) < 0.05 and abs(float(bias) - 1) < 0.05
    assert (tags, notes) == ("x,y", "one,two")  # a multi flag read at import time is not parsed twice
    assert "INFO:dflow:training for 150 steps" in result.stderr
    assert "WARNING:dflow:batch 32" in result.stderr
    logged_steps = [line for line in result.stderr.splitlines() if line.startswith("INFO:dflow:step ")]
    assert [line.split()[0] for line in logged_steps] == ["INFO:dflow:step"] * 3  # steps 0, 50, 100
    assert [int(line.split()[1]) for line in logged_steps] == [0, 50, 100]


def test_noflag_hides_info_and_main_return_value_is_the_exit_status(fit_script, tmp_path):
    result = run_script(fit_script, "--max_steps", "5", "--noverbose", f"--log_dir={tmp_path}/out",
                        "--exit_status=3")
    assert result.returncode == 3, result.stderr
    assert "INFO:" not in result.stderr  # TF 1.x hides INFO until set_verbosity
    assert "WARNING:dflow:batch 8" in result.stderr  # BATCH read FLAGS.max_steps at import time
    assert "unparsed: []" in result.stdout


@pytest.mark.parametrize("flag, message", [
    ("--max_steps=ten", "flag --max_steps=ten: invalid literal for int()"),
    ("--optimizer=adagrad", "flag --optimizer=adagrad: value should be one of <sgd|momentum>"),
])
def test_bad_flag_value_exits_1_naming_the_flag(fit_script, flag, message):
    result = run_script(fit_script, flag)
    assert result.returncode == 1
    assert f"fit.py: error: {message}" in result.stderr
    assert "Traceback" not in result.stderr
    assert "Pass --help to see the flags fit.py defines." in result.stderr


def test_help_prints_the_docstring_and_flags(fit_script):
    result = run_script(fit_script, "--help")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: fit.py [flags] [arguments]")
    assert "Fits y = 3x + 1 by gradient descent" in result.stdout
    for text in ("--max_steps: Number of steps to run trainer.", "(default: '200')", "--[no]verbose",
                 "--optimizer: <sgd|momentum>: Optimizer to use."):
        assert text in result.stdout


def test_tf_1_0_style_parse_flags_and_dunder_flags(tmp_path):
    """TF 1.0-1.4 scripts parse explicitly and print ``FLAGS.__flags``' values."""
    script = tmp_path / "old.py"
    script.write_text(textwrap.dedent('''
        import dflow as tf
        tf.flags.DEFINE_integer("batch_size", 64, "Batch Size")
        tf.flags.DEFINE_boolean("allow_soft_placement", True, "Allow device soft device placement")
        tf.flags.DEFINE_float(flag_name="dropout_keep_prob", default_value=0.5, docstring="Dropout")
        FLAGS = tf.flags.FLAGS
        FLAGS._parse_flags()
        for attr, value in sorted(FLAGS.__flags.items()):
            if attr in ("batch_size", "allow_soft_placement", "dropout_keep_prob"):
                print("{}={}".format(attr.upper(), value))
    '''))
    result = run_script(script, "--batch_size=8", "--noallow_soft_placement")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["ALLOW_SOFT_PLACEMENT=False", "BATCH_SIZE=8", "DROPOUT_KEEP_PROB=0.5"]


def test_run_without_main_says_what_to_define(tmp_path):
    script = tmp_path / "nomain.py"
    script.write_text("import dflow as tf\ntf.app.run()\n")
    result = run_script(script)
    assert result.returncode == 1
    assert "define main(argv) or pass it, tf.app.run(main=my_main)" in result.stderr


# ---- in-process: flags --------------------------------------------------------------------------
@pytest.fixture
def flag_values():
    values = tf.flags.FlagValues()
    tf.flags.DEFINE_string("data_dir", "/tmp/data", "Data.", flag_values=values)
    tf.flags.DEFINE_integer("steps", 10, "Steps.", flag_values=values)
    tf.flags.DEFINE_bool("fake_data", False, "Fake.", flag_values=values)
    tf.flags.DEFINE_multi_string("tag", [], "Tags.", flag_values=values)
    return values


def test_flags_call_form_parses_and_returns_the_rest(flag_values):
    rest = flag_values(["prog", "--steps", "7", "--fake_data", "x", "--other=1", "--data_dir=d"],
                       known_only=True)
    assert rest == ["prog", "x", "--other=1"]
    assert (flag_values.steps, flag_values.fake_data, flag_values.data_dir) == (7, True, "d")
    assert flag_values.flag_values_dict()["steps"] == 7


def test_unknown_flag_without_known_only_is_an_error(flag_values):
    with pytest.raises(tf.flags.UnrecognizedFlagError, match="Unknown command line flag 'stepz'"):
        flag_values(["prog", "--stepz=3"])


def test_lazy_flags_parse_sys_argv_on_first_read(flag_values, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["prog", "--steps=3", "--tag=a", "pos"])
    lazy = _LazyFlagValues(flag_values)
    assert not flag_values.is_parsed()
    assert lazy.steps == 3 and lazy.tag == ["a"]
    assert lazy.parse_command_line(sys.argv) == ["prog", "pos"]
    assert lazy.tag == ["a"]  # the same command line is not parsed a second time
    assert lazy.__flags == {"data_dir": "/tmp/data", "steps": 3, "fake_data": False, "tag": ["a"]}
    lazy.steps = 9
    assert lazy["steps"].value == 9 and "steps" in lazy and len(lazy) == len(flag_values)


def test_flags_defined_after_the_first_read_get_their_values(flag_values, monkeypatch):
    """A module read FLAGS at import; the script defines more flags after: tf.app.run parses them."""
    monkeypatch.setattr(sys, "argv", ["prog", "--steps=3", "--tag=a", "--late=x"])
    lazy = _LazyFlagValues(flag_values)
    assert lazy.steps == 3
    tf.flags.DEFINE_string("late", "default", "Defined after the first read.", flag_values=flag_values)
    assert lazy.parse_command_line(sys.argv) == ["prog"]
    assert (lazy.late, lazy.tag, lazy.steps) == ("x", ["a"], 3)


def test_app_run_calls_main_with_the_rest_and_exits_with_its_value(flag_values, monkeypatch):
    monkeypatch.setattr(tf.app, "FLAGS", _LazyFlagValues(flag_values))
    seen = []

    def main(argv):
        seen.append((argv, flag_values.steps))
        return 4

    with pytest.raises(SystemExit) as exit_:
        tf.app.run(main=main, argv=["prog", "--steps=5", "--nofake_data", "rest"])
    assert exit_.value.code == 4 and seen == [(["prog", "rest"], 5)]
    with pytest.raises(SystemExit) as exit_:
        tf.app.run(main=lambda: None, argv=["prog"])  # a main() without arguments is called bare
    assert exit_.value.code is None


def test_flags_sent_to_a_worker_carry_the_parsed_values(flag_values, monkeypatch):
    """A train_fn that reads FLAGS, pickled for the cluster's workers (tf.replicate), reads them there."""
    import cloudpickle

    monkeypatch.setattr(sys, "argv", ["prog", "--steps=6", "--fake_data"])
    lazy = _LazyFlagValues(flag_values)

    def train_fn(task_index):
        return task_index, lazy.steps, lazy.fake_data, lazy.data_dir

    assert cloudpickle.loads(cloudpickle.dumps(train_fn))(1) == (1, 6, True, "/tmp/data")
    sent = cloudpickle.loads(cloudpickle.dumps(lazy))
    assert sent.flag_values_dict() == lazy.flag_values_dict() and "steps" in sent
    with pytest.raises(AttributeError, match="no flag 'stepz' was defined in the client"):
        _ = sent.stepz


def test_tf_flags_and_tf_app_flags_are_one_module():
    assert tf.app.flags is tf.flags and tf.flags.FLAGS is tf.app.flags.FLAGS
    assert tf.flags.DEFINE_bool is tf.flags.DEFINE_boolean


# ---- in-process: logging ----------------------------------------------------------------------
@pytest.fixture
def dflow_log(caplog):
    before = logging.getLogger("dflow").level
    caplog.set_level(logging.DEBUG)
    yield caplog
    logging.getLogger("dflow").setLevel(before)


def test_logging_levels_and_verbosity(dflow_log):
    assert (tf.logging.DEBUG, tf.logging.INFO, tf.logging.WARN, tf.logging.ERROR, tf.logging.FATAL) == (
        10, 20, 30, 40, 50)
    tf.logging.set_verbosity(tf.logging.ERROR)
    assert tf.logging.get_verbosity() == tf.logging.ERROR
    tf.logging.info("hidden")
    tf.logging.warning("hidden too")
    tf.logging.error("shown %d", 1)
    tf.logging.fatal("fatal does not exit")
    tf.logging.set_verbosity(tf.logging.DEBUG)
    tf.logging.debug("debug %s", "shown")
    tf.logging.vlog(tf.logging.INFO, "vlog")
    tf.logging.log_if(tf.logging.INFO, "if true", True)
    tf.logging.log_if(tf.logging.INFO, "if false", False)
    records = [(r.name, r.levelname, r.getMessage()) for r in dflow_log.records]
    assert records == [("dflow", "ERROR", "shown 1"), ("dflow", "CRITICAL", "fatal does not exit"),
                       ("dflow", "DEBUG", "debug shown"), ("dflow", "INFO", "vlog"),
                       ("dflow", "INFO", "if true")]


def test_log_every_n_and_first_n_count_per_call_site(dflow_log):
    tf.logging.set_verbosity(tf.logging.INFO)
    for i in range(7):
        tf.logging.log_every_n(tf.logging.INFO, "every %d", 3, i)
        tf.logging.log_first_n(tf.logging.INFO, "first %d", 2, i)
    assert [r.getMessage() for r in dflow_log.records] == ["every 0", "first 0", "first 1", "every 3",
                                                          "every 6"]


def test_a_scripts_tensorflow_logger_gets_dflows_records_at_its_level(dflow_log):
    """TF 1.x scripts set up logging on Python's "tensorflow" logger (a file of the Estimator's
    loss lines, a level): dflow's records reach its handlers, and its level applies."""
    seen = []

    class Keep(logging.Handler):
        def emit(self, record):
            seen.append(record.getMessage())

    tensorflow_logger = logging.getLogger("tensorflow")
    keep = Keep()
    tensorflow_logger.addHandler(keep)
    logging.getLogger("dflow").setLevel(logging.NOTSET)  # (what set_verbosity has not set)
    try:
        tensorflow_logger.setLevel(logging.WARNING)
        tf.logging.info("hidden")
        tensorflow_logger.setLevel(logging.INFO)
        tf.logging.info("hello %s", "file")
        logging.getLogger("dflow").warning("dflow's own")
    finally:
        tensorflow_logger.removeHandler(keep)
        tensorflow_logger.setLevel(logging.NOTSET)
    assert seen == ["hello file", "dflow's own"]


# ---- in-process: gfile ------------------------------------------------------------------------
@pytest.fixture(params=["local", "memory"])
def root(request, tmp_path):
    path = str(tmp_path) if request.param == "local" else f"memory://gfile-test-{tmp_path.name}"
    tf.gfile.MakeDirs(path)
    yield path
    if tf.gfile.Exists(path):
        tf.gfile.DeleteRecursively(path)


def test_gfile_write_read_iterate(root):
    path = f"{root}/logs/notes.txt"
    tf.gfile.MakeDirs(f"{root}/logs")
    tf.gfile.MakeDirs(f"{root}/logs")  # exists: nothing to do
    with tf.gfile.GFile(path, "w") as f:
        f.write("line one\n")
        f.write(b"line two\n")  # TF's GFile takes bytes in text mode too
    with tf.gfile.Open(path, "a") as f:
        f.write("line three\n")
    with tf.gfile.GFile(path) as f:
        assert f.readline() == "line one\n"
        assert [line for line in f] == ["line two\n", "line three\n"]
    with tf.gfile.FastGFile(path, "rb") as f:
        assert f.read(4) == b"line" and f.tell() == 4
        f.seek(0)
        assert f.read() == b"line one\nline two\nline three\n"
    assert tf.gfile.GFile(path).size() == 29 == tf.gfile.Stat(path).length
    assert tf.gfile.GFile(path).readlines()[-1] == "line three\n"
    assert not tf.gfile.Stat(path).is_directory and tf.gfile.Stat(f"{root}/logs").is_directory


def test_gfile_directories(root):
    tf.gfile.MakeDirs(f"{root}/a/b")
    tf.gfile.MkDir(f"{root}/a/c")
    for name in ("a/x.txt", "a/b/y.txt", "a/b/z.csv"):
        with tf.gfile.GFile(f"{root}/{name}", "w") as f:
            f.write(name)
    assert sorted(tf.gfile.ListDirectory(f"{root}/a")) == ["b", "c", "x.txt"]
    assert tf.gfile.IsDirectory(f"{root}/a/b") and not tf.gfile.IsDirectory(f"{root}/a/x.txt")
    assert tf.gfile.Glob(f"{root}/a/b/*.txt") == [f"{root}/a/b/y.txt"]
    assert tf.gfile.Glob(f"{root}/a/*/*") == [f"{root}/a/b/y.txt", f"{root}/a/b/z.csv"]
    assert list(tf.gfile.Walk(f"{root}/a")) == [(f"{root}/a", ["b", "c"], ["x.txt"]),
                                                (f"{root}/a/b", [], ["y.txt", "z.csv"]),
                                                (f"{root}/a/c", [], [])]
    assert [d for d, _, _ in tf.gfile.Walk(f"{root}/a", in_order=False)] == [
        f"{root}/a/b", f"{root}/a/c", f"{root}/a"]
    assert list(tf.gfile.Walk(f"{root}/missing")) == []
    tf.gfile.Remove(f"{root}/a/x.txt")
    tf.gfile.DeleteRecursively(f"{root}/a/b")
    assert tf.gfile.ListDirectory(f"{root}/a") == ["c"]


def test_gfile_copy_and_rename(root):
    with tf.gfile.GFile(f"{root}/src.bin", "wb") as f:
        f.write(bytes(range(256)))
    tf.gfile.Copy(f"{root}/src.bin", f"{root}/copy.bin")
    with pytest.raises(tf.errors.AlreadyExistsError, match="copy.bin: already exists"):
        tf.gfile.Copy(f"{root}/src.bin", f"{root}/copy.bin")
    tf.gfile.Copy(f"{root}/src.bin", f"{root}/copy.bin", overwrite=True)
    tf.gfile.Rename(f"{root}/copy.bin", f"{root}/moved.bin")
    assert not tf.gfile.Exists(f"{root}/copy.bin")
    assert tf.gfile.GFile(f"{root}/moved.bin", "rb").read() == bytes(range(256))
    with pytest.raises(tf.errors.AlreadyExistsError):
        tf.gfile.Rename(f"{root}/src.bin", f"{root}/moved.bin")
    tf.gfile.Rename(f"{root}/src.bin", f"{root}/moved.bin", overwrite=True)
    assert sorted(tf.gfile.ListDirectory(root)) == ["moved.bin"]


def test_gfile_copies_across_filesystems(tmp_path):
    local = tmp_path / "weights.npy"
    np.save(local, np.arange(5.0))
    remote = f"memory://gfile-across-{os.getpid()}/weights.npy"
    tf.gfile.Copy(str(local), remote)
    with tf.gfile.GFile(remote, "rb") as f:
        np.testing.assert_array_equal(np.load(f), np.arange(5.0))
    tf.gfile.DeleteRecursively(os.path.dirname(remote))


def test_gfile_errors_are_tf_errors(root):
    missing = f"{root}/missing.txt"
    for call in (lambda: tf.gfile.GFile(missing).read(), lambda: tf.gfile.Remove(missing),
                 lambda: tf.gfile.ListDirectory(f"{root}/nodir"), lambda: tf.gfile.Stat(missing),
                 lambda: tf.gfile.DeleteRecursively(f"{root}/nodir"),
                 lambda: tf.gfile.MkDir(f"{root}/no/parent")):
        with pytest.raises(tf.errors.NotFoundError):
            call()
    with pytest.raises(FileNotFoundError):  # what plain Python code catches, too
        tf.gfile.GFile(missing, "rb")
    tf.gfile.MkDir(f"{root}/made")
    with pytest.raises(tf.errors.AlreadyExistsError):
        tf.gfile.MkDir(f"{root}/made")
    with pytest.raises(tf.errors.FailedPreconditionError, match="DeleteRecursively"):
        tf.gfile.Remove(f"{root}/made")
    with pytest.raises(ValueError, match="GFile mode must be"):
        tf.gfile.GFile(f"{root}/x", "rw")


def test_tf_io_gfile_has_the_snake_case_names(tmp_path):
    gfile = tf.io.gfile
    gfile.makedirs(str(tmp_path / "d" / "e"))
    with gfile.GFile(str(tmp_path / "d" / "f.txt"), "w") as f:
        f.write("x")
    assert gfile.exists(str(tmp_path / "d")) and gfile.isdir(str(tmp_path / "d" / "e"))
    assert sorted(gfile.listdir(str(tmp_path / "d"))) == ["e", "f.txt"]
    assert gfile.glob(str(tmp_path / "d" / "*.txt")) == [str(tmp_path / "d" / "f.txt")]
    assert [d for d, _, _ in gfile.walk(str(tmp_path / "d"))] == [str(tmp_path / "d"), str(tmp_path / "d/e")]
    gfile.copy(str(tmp_path / "d" / "f.txt"), str(tmp_path / "g.txt"))
    gfile.rename(str(tmp_path / "g.txt"), str(tmp_path / "h.txt"))
    gfile.remove(str(tmp_path / "h.txt"))
    gfile.rmtree(str(tmp_path / "d"))
    assert gfile.listdir(str(tmp_path)) == []


def test_gfile_glob_keeps_a_relative_pattern_relative(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    tf.gfile.MakeDirs("images")
    for name in ("b.png", "a.png", "c.jpg"):
        tf.gfile.GFile(os.path.join("images", name), "wb").close()
    assert tf.gfile.Glob(os.path.join("images", "*.png")) == ["images/a.png", "images/b.png"]


# ---- in-process: compat, version ----------------------------------------------------------------
def test_compat_conversions():
    assert tf.compat.as_str(b"caf\xc3\xa9") == "café" == tf.compat.as_text("café")
    assert tf.compat.as_bytes("café") == b"caf\xc3\xa9" == tf.compat.as_bytes(bytearray(b"caf\xc3\xa9"))
    assert tf.compat.as_str_any(b"x") == "x" and tf.compat.as_str_any(3) == "3"
    with pytest.raises(TypeError, match="expected binary or unicode string, got 3"):
        tf.compat.as_bytes(3)
    assert isinstance(np.int64(1), tf.compat.integral_types)


def test_compat_v1_is_dflow_itself():
    import dflow.compat.v1 as tf1
    from dflow.compat.v1 import placeholder

    assert tf1 is tf and tf.compat.v1 is tf and placeholder is tf.placeholder
    tf1.disable_v2_behavior()  # scripts ported to TF 2's compat.v1 call these first
    tf1.disable_eager_execution()
    assert not tf1.executing_eagerly()
    with tf1.Graph().as_default():
        x = tf1.placeholder(tf1.float32, [None, 2])
        with tf1.Session() as sess:
            assert sess.run(tf1.reduce_sum(x), {x: [[1.0, 2.0]]}) == 3.0


def test_version_is_a_tf_1_15_api_level_and_dflow_has_its_own():
    major, minor, patch = (int(part) for part in tf.__version__.split("."))
    assert (major, minor) == (1, 15) and tf.VERSION == tf.__version__
    assert tf.GIT_VERSION == f"dflow-{tf.DFLOW_VERSION}"
    with open(os.path.join(REPO, "setup.cfg")) as f:
        assert "version = attr: dflow.version.DFLOW_VERSION" in f.read()
