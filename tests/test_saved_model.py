"""tf.saved_model (TF 1.x): a trained model saved with simple_save or SavedModelBuilder loads into a
new graph and session and predicts bit for bit as before; its meta graphs are picked by tags, its
main op runs after the restore, its assets come along; TF's import paths reach it; each way to
get it wrong fails saying what to do."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import dflow as tf
from dflow.saved_model import constants

REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INPUTS = np.random.default_rng(1).normal(size=(5, 3)).astype(np.float32)


def train_model(steps: int = 3):
    """A linear softmax classifier trained a few steps in the default graph and a new session;
    (session, input placeholder, probabilities, train op)."""
    rng = np.random.default_rng(0)
    x = tf.placeholder(tf.float32, [None, 3], name="x")
    labels = tf.placeholder(tf.int32, [None], name="labels")
    w = tf.Variable(rng.normal(size=(3, 2)).astype(np.float32), name="w")
    b = tf.Variable(tf.zeros([2]), name="b")
    logits = tf.matmul(x, w) + b
    probabilities = tf.nn.softmax(logits, name="probabilities")
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
    train_op = tf.train.AdamOptimizer(0.1).minimize(loss)
    sess = tf.Session()
    sess.run(tf.global_variables_initializer())
    for _ in range(steps):
        sess.run(train_op, {x: rng.normal(size=(8, 3)), labels: rng.integers(0, 2, 8)})
    return sess, x, probabilities, train_op


def predict(meta_graph, sess, key="serving_default", import_scope=None):
    """Run the loaded signature ``key`` on :data:`INPUTS` through its tensors' names."""
    signature = meta_graph.signature_def[key]
    prefix = f"{import_scope}/" if import_scope else ""
    x = sess.graph.get_tensor_by_name(prefix + signature.inputs["x"].name)
    y = sess.graph.get_tensor_by_name(prefix + signature.outputs["y"].name)
    return sess.run(y, {x: INPUTS})


def test_simple_save_then_load_predicts_bit_for_bit(tmp_path):
    export_dir = str(tmp_path / "model")
    sess, x, y, _ = train_model()
    expected = sess.run(y, {x: INPUTS})
    tf.saved_model.simple_save(sess, export_dir, inputs={"x": x}, outputs={"y": y})
    assert sorted(os.listdir(export_dir)) == ["saved_model.json", "variables"]
    with tf.Graph().as_default(), tf.Session() as loaded:
        meta_graph = tf.saved_model.loader.load(loaded, [tf.saved_model.tag_constants.SERVING], export_dir)
        np.testing.assert_array_equal(predict(meta_graph, loaded), expected)
    signature = meta_graph.signature_def[tf.saved_model.signature_constants.DEFAULT_SERVING_SIGNATURE_DEF_KEY]
    assert meta_graph.meta_info_def.tags == ["serve"]
    assert signature.method_name == tf.saved_model.signature_constants.PREDICT_METHOD_NAME
    assert (signature.inputs["x"].name, signature.outputs["y"].name) == ("x:0", "probabilities:0")
    assert tf.as_dtype(signature.inputs["x"].dtype) is tf.float32
    assert [d.size for d in signature.inputs["x"].tensor_shape.dim] == [-1, 3]
    assert "trainable_variables" in meta_graph.collection_def


def test_a_loaded_models_tensors_by_name_work_as_in_tf(tmp_path):
    """What scripts do after a load: a variable's tensor by name ('w:0') is its value in new ops and
    its reference for tf.assign, and a TensorInfo's shape makes a TensorShape."""
    export_dir = str(tmp_path / "model")
    sess, x, y, _ = train_model()
    tf.saved_model.simple_save(sess, export_dir, inputs={"x": x}, outputs={"y": y})
    w_value = sess.run("w:0")
    with tf.Graph().as_default() as graph, tf.Session() as loaded:
        meta_graph = tf.saved_model.loader.load(loaded, ["serve"], export_dir)
        w = graph.get_tensor_by_name("w:0")
        np.testing.assert_array_equal(loaded.run(2.0 * w + tf.reduce_sum(w)), 2.0 * w_value + w_value.sum())
        loaded.run(tf.assign(w, tf.zeros_like(w)))
        np.testing.assert_array_equal(loaded.run("w:0"), np.zeros_like(w_value))
        x_info = meta_graph.signature_def["serving_default"].inputs["x"]
        assert tf.TensorShape(x_info.tensor_shape).as_list() == [None, 3]


def test_builder_saves_two_meta_graphs_sharing_the_variables(tmp_path):
    export_dir = str(tmp_path / "model")
    sess, x, y, train_op = train_model()
    expected = sess.run(y, {x: INPUTS})
    signatures = {"serving_default": tf.saved_model.predict_signature_def({"x": x}, {"y": y})}
    builder = tf.saved_model.builder.SavedModelBuilder(export_dir)
    builder.add_meta_graph_and_variables(sess, [tf.saved_model.TRAINING], signature_def_map=signatures)
    assert os.listdir(export_dir) == ["variables"]  # as TF: the variables now, the meta graphs at save()
    with tf.Graph().as_default():  # a second graph, built again for serving: no optimizer, same names
        x = tf.placeholder(tf.float32, [None, 3], name="x")
        w, b = tf.Variable(tf.zeros([3, 2]), name="w"), tf.Variable(tf.zeros([2]), name="b")
        y = tf.nn.softmax(tf.matmul(x, w) + b, name="probabilities")
        builder.add_meta_graph([tf.saved_model.SERVING, tf.saved_model.GPU],
                               {"serving_default": tf.saved_model.predict_signature_def({"x": x}, {"y": y})})
    path = builder.save(as_text=True)
    assert path == os.path.join(export_dir, "saved_model.json")
    for tags in (["train"], ["gpu", "serve"]):
        with tf.Graph().as_default() as graph, tf.Session() as loaded:
            meta_graph = tf.saved_model.load(loaded, tags, export_dir)
            np.testing.assert_array_equal(predict(meta_graph, loaded), expected)
            has_optimizer = any(op.type.startswith("Apply") for op in graph.get_operations())
            assert has_optimizer == (tags == ["train"]), tags


def test_main_op_runs_after_the_restore(tmp_path):
    """The main op reads a restored variable (it would fail on an uninitialized one) into a local
    variable, which the checkpoint does not hold."""
    export_dir = str(tmp_path / "model")
    sess, x, y, _ = train_model()
    w = next(v for v in tf.global_variables() if v.op.name == "w")
    copy = tf.Variable(tf.zeros([3, 2]), name="w_copy", collections=[tf.GraphKeys.LOCAL_VARIABLES])
    with tf.control_dependencies([tf.saved_model.main_op.main_op()]):
        main_op = tf.group(tf.assign(copy, w * 2.0))
    builder = tf.saved_model.Builder(export_dir)
    builder.add_meta_graph_and_variables(sess, ["serve"], main_op=main_op)
    builder.save()
    with tf.Graph().as_default() as graph, tf.Session() as loaded:
        tf.saved_model.loader.load(loaded, ["serve"], export_dir)
        np.testing.assert_array_equal(loaded.run("w_copy:0"), sess.run(w) * 2.0)
        assert graph.get_collection(constants.MAIN_OP_KEY)[0].name == main_op.name


def test_legacy_init_op_initializes_tables_at_load(tmp_path):
    export_dir = str(tmp_path / "model")
    words = tf.placeholder(tf.string, [None], name="words")
    table = tf.contrib.lookup.index_table_from_tensor(tf.constant(["a", "b", "c"]), default_value=-1)
    ids = tf.identity(table.lookup(words), name="ids")
    with tf.Session() as sess:
        sess.run(tf.tables_initializer())
        tf.saved_model.simple_save(sess, export_dir, {"words": words}, {"ids": ids},
                                   legacy_init_op=tf.tables_initializer())
    with tf.Graph().as_default(), tf.Session() as loaded:
        tf.saved_model.loader.load(loaded, ["serve"], export_dir)
        assert loaded.run("ids:0", {"words:0": ["c", "a", "z"]}).tolist() == [2, 0, -1]


def test_assets_are_copied_and_fed_to_the_main_op(tmp_path):
    """The main op sees the asset's copy in ``assets/``, not the file it was saved from."""
    source = tmp_path / "scale.txt"
    source.write_text("7.5")
    export_dir = str(tmp_path / "model")
    asset = tf.constant(str(source), name="scale_file")
    tf.add_to_collection(tf.GraphKeys.ASSET_FILEPATHS, asset)
    scale = tf.Variable(0.0, name="scale", collections=[tf.GraphKeys.LOCAL_VARIABLES])
    main_op = tf.group(tf.assign(scale, tf.string_to_number(tf.read_file(asset))))
    with tf.Session() as sess:
        tf.saved_model.simple_save(sess, export_dir, {"file": asset}, {"scale": scale.value()},
                                   legacy_init_op=main_op)
    source.unlink()
    assert os.listdir(os.path.join(export_dir, "assets")) == ["scale.txt"]
    with tf.Graph().as_default(), tf.Session() as loaded:
        meta_graph = tf.saved_model.loader.load(loaded, ["serve"], export_dir)
        assert loaded.run("scale:0") == 7.5
    assert [asset.filename for asset in meta_graph.asset_file_def] == ["scale.txt"]


def test_import_scope_loads_two_copies_side_by_side(tmp_path):
    export_dir = str(tmp_path / "model")
    sess, x, y, _ = train_model()
    expected = sess.run(y, {x: INPUTS})
    tf.saved_model.simple_save(sess, export_dir, {"x": x}, {"y": y})
    with tf.Graph().as_default() as graph, tf.Session() as loaded:
        for scope in ("first", "second"):
            meta_graph = tf.saved_model.loader.load(loaded, ["serve"], export_dir, import_scope=scope)
            np.testing.assert_array_equal(predict(meta_graph, loaded, import_scope=scope), expected)
        signature = meta_graph.signature_def["serving_default"]
        found = tf.saved_model.utils.get_tensor_from_tensor_info(signature.outputs["y"], graph, "second")
        assert found.name == "second/probabilities:0"


def test_signatures_of_each_kind():
    examples = tf.placeholder(tf.string, [None], name="examples")
    scores = tf.placeholder(tf.float32, [None, 2], name="scores")
    classes = tf.placeholder(tf.string, [None, 2], name="classes")
    classify = tf.saved_model.classification_signature_def(examples, classes, scores)
    regress = tf.saved_model.regression_signature_def(examples, scores)
    assert sorted(classify.outputs) == ["classes", "scores"] and regress.outputs["outputs"].name == "scores:0"
    assert tf.saved_model.is_valid_signature(classify) and tf.saved_model.is_valid_signature(regress)
    wrong = tf.saved_model.build_signature_def({"inputs": tf.saved_model.build_tensor_info(scores)},
                                               {"outputs": tf.saved_model.build_tensor_info(scores)},
                                               tf.saved_model.REGRESS_METHOD_NAME)
    assert not tf.saved_model.is_valid_signature(wrong)  # a regression's input is serialized examples
    with pytest.raises(ValueError, match="Regression examples must be a string Tensor"):
        tf.saved_model.regression_signature_def(scores, scores)
    with pytest.raises(ValueError, match="Prediction inputs cannot be None or empty"):
        tf.saved_model.predict_signature_def({}, {"y": scores})


def test_a_sparse_input_round_trips(tmp_path):
    export_dir = str(tmp_path / "model")
    sparse = tf.sparse_placeholder(tf.float32, name="sparse")
    total = tf.reduce_sum(sparse.values)
    with tf.Session() as sess:
        tf.saved_model.simple_save(sess, export_dir, {"sparse": sparse}, {"total": tf.identity(total)})
    with tf.Graph().as_default() as graph, tf.Session() as loaded:
        meta_graph = tf.saved_model.loader.load(loaded, ["serve"], export_dir)
        signature = meta_graph.signature_def["serving_default"]
        found = tf.saved_model.get_tensor_from_tensor_info(signature.inputs["sparse"], graph)
        total = tf.saved_model.get_tensor_from_tensor_info(signature.outputs["total"], graph)
        value = tf.SparseTensorValue([[0, 0], [1, 1]], [1.5, 2.0], [2, 2])
        assert loaded.run(total, {found: value}) == 3.5


def test_tensorflow_python_saved_model_modules_are_dflows():
    from dflow.python.saved_model import (
        builder,
        loader,
        signature_constants,
        signature_def_utils,
        signature_def_utils_impl,
        tag_constants,
        utils,
    )

    assert builder.SavedModelBuilder is tf.saved_model.builder.SavedModelBuilder
    assert signature_def_utils_impl.predict_signature_def is signature_def_utils.predict_signature_def
    assert loader.load is tf.saved_model.loader.load
    assert utils.build_tensor_info is tf.saved_model.build_tensor_info
    assert (tag_constants.SERVING, signature_constants.DEFAULT_SERVING_SIGNATURE_DEF_KEY) == (
        "serve", "serving_default")


SAVE_SCRIPT = """\
    import numpy as np
    import tensorflow as tf
    from tensorflow.python.saved_model import builder as saved_model_builder
    from tensorflow.python.saved_model import signature_constants, tag_constants
    from tensorflow.python.saved_model.signature_def_utils_impl import predict_signature_def

    sess = tf.InteractiveSession()
    x = tf.placeholder(tf.float32, [None, 3], name="myInput")
    W = tf.Variable(np.arange(6, dtype=np.float32).reshape(3, 2) / 7)
    y = tf.nn.softmax(tf.matmul(x, W))
    tf.identity(y, name="myOutput")
    tf.global_variables_initializer().run()
    builder = saved_model_builder.SavedModelBuilder("./model")
    signature = predict_signature_def(inputs={"myInput": x}, outputs={"myOutput": y})
    builder.add_meta_graph_and_variables(sess=sess, tags=[tag_constants.SERVING],
                                         signature_def_map={"predict": signature})
    builder.save()
    print(y.eval({x: np.ones((1, 3))}).tolist())
    """

LOAD_SCRIPT = """\
    import numpy as np
    import tensorflow as tf
    from tensorflow.python.saved_model import loader

    with tf.Session(graph=tf.Graph()) as sess:
        meta_graph = loader.load(sess, ["serve"], "./model")
        signature = meta_graph.signature_def["predict"]
        x = sess.graph.get_tensor_by_name(signature.inputs["myInput"].name)
        y = tf.get_default_graph().get_tensor_by_name("myOutput:0")
        print(sess.run(y, feed_dict={x: np.ones((1, 3))}).tolist())
    """


def test_dflow_run_saves_and_loads_as_tf_scripts_do(tmp_path):
    """A TF 1.x export script and its loading script (as mogoweb/aiexamples' saved_model pair)."""
    printed = []
    for name, text in (("save_model.py", SAVE_SCRIPT), ("load_model.py", LOAD_SCRIPT)):
        (tmp_path / name).write_text(textwrap.dedent(text))
        done = subprocess.run([sys.executable, "-m", "dflow.cli", "run", name], capture_output=True,
                              text=True, timeout=300, cwd=tmp_path,
                              env={**os.environ, "PYTHONPATH": REPOSITORY})
        assert done.returncode == 0, done.stderr
        printed.append(done.stdout.strip().splitlines()[-1])
    assert printed[0] == printed[1]


# ---- refusals -----------------------------------------------------------------------------------
def saved(tmp_path) -> str:
    export_dir = str(tmp_path / "model")
    sess, x, y, _ = train_model(steps=1)
    tf.saved_model.simple_save(sess, export_dir, {"x": x}, {"y": y})
    return export_dir


def test_an_export_dir_that_is_not_empty_is_refused(tmp_path):
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "notes.txt").write_text("mine")
    with pytest.raises(AssertionError, match="Export directory already exists, and isn't empty.*model"):
        tf.saved_model.builder.SavedModelBuilder(str(tmp_path / "model"))
    tf.saved_model.builder.SavedModelBuilder(str(tmp_path / "empty"))  # an empty or new one is fine


def test_add_meta_graph_before_the_variables_is_refused(tmp_path):
    tf.Variable(1.0)
    builder = tf.saved_model.builder.SavedModelBuilder(str(tmp_path / "model"))
    with pytest.raises(AssertionError, match="Please invoke `add_meta_graph_and_variables\\(\\)` first"):
        builder.add_meta_graph(["serve"])
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        builder.add_meta_graph_and_variables(sess, ["train"])
        with pytest.raises(AssertionError, match="has already been saved. Please invoke `add_meta_graph"):
            builder.add_meta_graph_and_variables(sess, ["serve"])


def test_a_signature_of_another_graphs_tensors_is_refused(tmp_path):
    with tf.Graph().as_default():
        elsewhere = tf.placeholder(tf.float32, name="elsewhere")
    sess, x, y, _ = train_model(steps=1)
    signature = tf.saved_model.predict_signature_def({"x": elsewhere}, {"y": y})
    builder = tf.saved_model.builder.SavedModelBuilder(str(tmp_path / "model"))
    with pytest.raises(ValueError, match="not in the graph being saved \\(serving_default: elsewhere:0\\)"):
        builder.add_meta_graph_and_variables(sess, ["serve"], {"serving_default": signature})
    with pytest.raises(AssertionError, match="must have the name and dtype fields set"):
        builder.add_meta_graph_and_variables(sess, ["serve"], {"bad": tf.saved_model.build_signature_def(
            {"x": tf.saved_model.utils.build_tensor_info(x)}, {"y": "probabilities:0"})})


def test_loading_a_missing_directory_says_so(tmp_path):
    with tf.Session() as sess, pytest.raises(FileNotFoundError, match="SavedModel file does not exist at: .*"
                                                                       "no directory .*nowhere.*simple_save"):
        tf.saved_model.loader.load(sess, ["serve"], str(tmp_path / "nowhere"))
    assert not tf.saved_model.contains_saved_model(str(tmp_path / "nowhere"))


def test_an_export_interrupted_before_save_does_not_load(tmp_path):
    sess, x, y, _ = train_model(steps=1)
    builder = tf.saved_model.builder.SavedModelBuilder(str(tmp_path / "model"))
    builder.add_meta_graph_and_variables(sess, ["serve"])  # ... and the process dies before save()
    assert not tf.saved_model.loader.maybe_saved_model_directory(str(tmp_path / "model"))
    with tf.Graph().as_default(), tf.Session() as loaded, pytest.raises(
            FileNotFoundError, match="an export interrupted before save\\(\\) leaves none"):
        tf.saved_model.loader.load(loaded, ["serve"], str(tmp_path / "model"))


def test_tags_no_meta_graph_has_are_refused_listing_those_there(tmp_path):
    export_dir = saved(tmp_path)
    assert tf.saved_model.loader.maybe_saved_model_directory(export_dir)
    with tf.Graph().as_default(), tf.Session() as sess, pytest.raises(
            RuntimeError, match=r"MetaGraphDef associated with tags \['gpu', 'serve'\] could not be found in "
                                r"SavedModel .*available tags \(one list per meta graph\): \[\['serve'\]\]"):
        tf.saved_model.loader.load(sess, ["serve", "gpu"], export_dir)


def test_tensorflows_own_saved_model_is_refused_saying_dflow_cannot_read_it(tmp_path):
    (tmp_path / "saved_model.pb").write_bytes(b"\x08\x01\x12\x00")
    (tmp_path / "variables").mkdir()
    refusal = r"by TensorFlow \(saved_model.pb, a protobuf\), which dflow cannot read.*export the model"
    with tf.Session() as sess, pytest.raises(ValueError, match=refusal):
        tf.saved_model.loader.load(sess, ["serve"], str(tmp_path))


def test_a_signature_naming_a_tensor_the_graph_lacks_is_refused_at_load(tmp_path):
    export_dir = saved(tmp_path)
    path = os.path.join(export_dir, "saved_model.json")
    with open(path) as f:
        plain = json.load(f)
    plain["meta_graphs"][0]["signature_def"]["serving_default"]["outputs"]["y"]["name"] = "gone:0"
    with open(path, "w") as f:
        json.dump(plain, f)
    lacking = "signatures name tensors its graph does not have \\(serving_default: gone:0\\)"
    with tf.Graph().as_default(), tf.Session() as sess, pytest.raises(ValueError, match=lacking):
        tf.saved_model.loader.load(sess, ["serve"], export_dir)


def test_a_file_of_another_format_is_refused(tmp_path):
    (tmp_path / "saved_model.json").write_text('{"format": "something else"}')
    with tf.Session() as sess, pytest.raises(ValueError, match="not a dflow SavedModel: format 'something"):
        tf.saved_model.loader.load(sess, ["serve"], str(tmp_path))
