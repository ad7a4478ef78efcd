"""tf.estimator in the shape TF 1.x examples use it: a model_fn returning EstimatorSpec per mode,
numpy_input_fn, train/evaluate/predict, checkpoints in model_dir carried between calls."""

import os

import numpy as np
import pytest
from sklearn.datasets import load_digits

import dflow as tf


def streaming_accuracy(labels, predictions):
    """A (value, update_op) metric on local variables, the contract of tf.metrics.accuracy."""
    total = tf.Variable(0.0, trainable=False, collections=[tf.GraphKeys.LOCAL_VARIABLES], name="total")
    count = tf.Variable(0.0, trainable=False, collections=[tf.GraphKeys.LOCAL_VARIABLES], name="count")
    correct = tf.reduce_sum(tf.cast(tf.equal(labels, predictions), tf.float32))
    update = tf.group(tf.assign_add(total, correct),
                      tf.assign_add(count, tf.cast(tf.size(labels), tf.float32)))
    return total / count, update


def model_fn(features, labels, mode, params):
    images = features["images"]
    hidden = tf.nn.relu(tf.matmul(images, tf.get_variable("w1", [64, params["hidden"]]))
                        + tf.get_variable("b1", [params["hidden"]], initializer=tf.zeros_initializer()))
    logits = tf.matmul(hidden, tf.get_variable("w2", [params["hidden"], 10]))
    pred_classes = tf.argmax(logits, axis=1)
    if mode == tf.estimator.ModeKeys.PREDICT:
        return tf.estimator.EstimatorSpec(mode, predictions={"class": pred_classes,
                                                             "probabilities": tf.nn.softmax(logits)})
    loss_op = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
        logits=logits, labels=tf.cast(labels, dtype=tf.int32)))
    optimizer = tf.train.AdamOptimizer(learning_rate=params["learning_rate"])
    train_op = optimizer.minimize(loss_op, global_step=tf.train.get_global_step())
    acc_op = streaming_accuracy(labels=labels, predictions=pred_classes)
    return tf.estimator.EstimatorSpec(mode=mode, predictions=pred_classes, loss=loss_op, train_op=train_op,
                                      eval_metric_ops={"accuracy": acc_op})


@pytest.fixture(scope="module")
def digits():
    data = load_digits()
    images = (data.data / 16.0).astype(np.float32)
    labels = data.target.astype(np.int64)
    return images[:1400], labels[:1400], images[1400:], labels[1400:]


def test_train_evaluate_predict_on_the_digits(digits, tmp_path):
    train_x, train_y, test_x, test_y = digits
    model = tf.estimator.Estimator(model_fn, model_dir=str(tmp_path),
                                   params={"hidden": 32, "learning_rate": 0.01},
                                   config=tf.estimator.RunConfig(tf_random_seed=1))
    input_fn = tf.estimator.inputs.numpy_input_fn(x={"images": train_x}, y=train_y, batch_size=64,
                                                  num_epochs=None, shuffle=True)
    assert model.train(input_fn, steps=500) is model
    test_fn = tf.estimator.inputs.numpy_input_fn(x={"images": test_x}, y=test_y, batch_size=100,
                                                 shuffle=False)
    e = model.evaluate(test_fn)
    assert set(e) == {"accuracy", "loss", "global_step"} and e["global_step"] == 500
    assert e["accuracy"] > 0.9 and e["loss"] < 0.4, e
    predictions = list(model.predict(tf.estimator.inputs.numpy_input_fn(
        x={"images": test_x}, batch_size=100, shuffle=False)))
    assert len(predictions) == len(test_x) and set(predictions[0]) == {"class", "probabilities"}
    classes = np.array([p["class"] for p in predictions])
    np.testing.assert_allclose(np.mean(classes == test_y), e["accuracy"], rtol=1e-6)
    # the checkpoint carries the model to the next call: training goes on from step 500
    model.train(input_fn, steps=50)
    assert model.evaluate(test_fn, steps=2)["global_step"] == 550
    model.train(input_fn, max_steps=550)  # already there: skipped
    assert model.get_variable_value("global_step") == 550
    assert "w1" in model.get_variable_names() and model.get_variable_value("w1").shape == (64, 32)


def test_finite_epochs_stop_training_and_a_smaller_last_batch_counts(tmp_path):
    x = np.linspace(-1, 1, 50, dtype=np.float32)

    def linear_fn(features, labels, mode):
        w = tf.get_variable("w", [], initializer=tf.zeros_initializer())
        loss = tf.reduce_mean(tf.square(features * w - labels))
        step = tf.train.get_or_create_global_step()
        train_op = tf.train.GradientDescentOptimizer(0.5).minimize(loss, global_step=step)
        return tf.estimator.EstimatorSpec(mode, predictions=features * w, loss=loss, train_op=train_op)

    model = tf.estimator.Estimator(linear_fn, model_dir=str(tmp_path))
    model.train(tf.estimator.inputs.numpy_input_fn(x, 2 * x, batch_size=16, num_epochs=3, shuffle=True))
    assert model.get_variable_value("global_step") == 3 * 4  # batches of 16, 16, 16, 2
    metrics, exports = tf.estimator.train_and_evaluate(
        model, tf.estimator.TrainSpec(tf.estimator.inputs.numpy_input_fn(x, 2 * x, 10, None, True),
                                      max_steps=60),
        tf.estimator.EvalSpec(tf.estimator.inputs.numpy_input_fn(x, 2 * x, 10, 1, False), steps=None))
    assert metrics["global_step"] == 60 and metrics["loss"] < 1e-4 and exports == []
    class CountingHook(tf.train.SessionRunHook):
        def begin(self):
            self.runs, self.ended = 0, False

        def after_run(self, run_context, run_values):
            self.runs += 1

        def end(self, session):
            self.ended = True

    hook = CountingHook()
    batches = list(model.predict(tf.estimator.inputs.numpy_input_fn(x, batch_size=20, shuffle=False),
                                 hooks=[hook], yield_single_examples=False))
    assert hook.runs == 3 and hook.ended
    assert [len(b) for b in batches] == [20, 20, 10]
    np.testing.assert_allclose(np.concatenate(batches), 2 * x, atol=1e-3)


def test_mistakes_say_what_to_do(tmp_path):
    with pytest.raises(ValueError, match="shuffle must be provided explicitly"):
        tf.estimator.inputs.numpy_input_fn(x={"a": np.zeros(3)}, y=np.zeros(3))
    with pytest.raises(AttributeError, match="DNNClassifier is not supported by dflow.*model_fn"):
        tf.estimator.DNNClassifier  # noqa: B018

    def no_train_op(features, labels, mode):
        w = tf.get_variable("w", [], initializer=tf.zeros_initializer())
        return tf.estimator.EstimatorSpec(mode, loss=tf.reduce_sum(features * w))

    model = tf.estimator.Estimator(no_train_op, model_dir=str(tmp_path / "a"))
    input_fn = tf.estimator.inputs.numpy_input_fn(np.ones(4, np.float32), batch_size=2, shuffle=False)
    with pytest.raises(ValueError, match="Missing train_op"):
        model.train(input_fn)
    with pytest.raises(ValueError, match="Could not find trained model"):
        model.evaluate(input_fn)
    model = tf.estimator.Estimator(model_fn, model_dir=str(tmp_path / "b"), params={"hidden": 2,
                                                                                  "learning_rate": 0.1})
    with pytest.raises(ValueError, match="steps= or max_steps="):
        model.train(lambda: ({"images": tf.zeros([1, 64])}, tf.constant([1], tf.int64)))
    model.train(lambda: ({"images": tf.zeros([1, 64])}, tf.constant([1], tf.int64)), steps=3)
    assert model.get_variable_value("global_step") == 3


def digits_model_fn(features, labels, mode, params):
    """model_fn with the three kinds of serving output, as official models write them: class
    scores, the class as a string, and a predict output of both."""
    spec = model_fn(features, labels, mode, params)
    if mode != tf.estimator.ModeKeys.PREDICT:
        return spec
    scores = spec.predictions["probabilities"]
    classes = tf.as_string(spec.predictions["class"])
    return spec._replace(export_outputs={
        "serving_default": tf.estimator.export.PredictOutput(spec.predictions),
        "classify": tf.estimator.export.ClassificationOutput(scores=scores, classes=classes),
        "regress": tf.estimator.export.RegressionOutput(tf.reduce_max(scores, axis=1))})


def test_an_export_serves_what_predict_gives(digits, tmp_path, caplog):
    """export_savedmodel after train: the loaded SavedModel's default signature gives
    Estimator.predict's values; a parsing receiver serves the classify and regress signatures
    from serialized tf.train.Example records; each export is a new directory, whole."""
    train_x, train_y, test_x, _ = digits
    model = tf.estimator.Estimator(digits_model_fn, model_dir=str(tmp_path / "model"),
                                   params={"hidden": 16, "learning_rate": 0.01})
    model.train(tf.estimator.inputs.numpy_input_fn({"images": train_x}, train_y, batch_size=64,
                                                   num_epochs=1, shuffle=True))
    expected = list(model.predict(tf.estimator.inputs.numpy_input_fn({"images": test_x[:5]}, shuffle=False)))
    vocabulary = tmp_path / "labels.txt"
    vocabulary.write_text("\n".join(map(str, range(10))))

    raw_fn = tf.estimator.export.build_raw_serving_input_receiver_fn(
        {"images": tf.placeholder(tf.float32, [None, 64])})
    with caplog.at_level("WARNING", logger="dflow"):
        raw_dir = model.export_savedmodel(str(tmp_path / "export"), raw_fn,
                                          assets_extra={"vocab/labels.txt": str(vocabulary)})
    # classify and regress need serialized examples: left out of a raw export, saying why
    assert "Signature classify is not exported: Classification input must be a single string" in caplog.text
    assert isinstance(raw_dir, bytes) and os.fsdecode(raw_dir).startswith(str(tmp_path / "export"))
    assert (tmp_path / "export" / os.path.basename(os.fsdecode(raw_dir)) / "assets.extra" / "vocab"
            / "labels.txt").read_text() == vocabulary.read_text()
    with tf.Graph().as_default(), tf.Session() as sess:
        serve = [tf.saved_model.tag_constants.SERVING]
        signatures = tf.saved_model.loader.load(sess, serve, raw_dir).signature_def
        assert set(signatures) == {"serving_default"}
        default = signatures["serving_default"]
        served = sess.run({key: info.name for key, info in default.outputs.items()},
                          {default.inputs["images"].name: test_x[:5]})
    np.testing.assert_array_equal(served["class"], [e["class"] for e in expected])
    np.testing.assert_allclose(served["probabilities"], [e["probabilities"] for e in expected], rtol=1e-6)

    spec = {"images": tf.FixedLenFeature([64], tf.float32)}
    parsing_fn = tf.estimator.export.build_parsing_serving_input_receiver_fn(spec)
    parsing_dir = model.export_savedmodel(str(tmp_path / "export"), parsing_fn)
    assert parsing_dir != raw_dir and sorted(os.listdir(tmp_path / "export")) == sorted(
        os.path.basename(os.fsdecode(d)) for d in (raw_dir, parsing_dir))  # no temp- left behind
    records = [tf.train.Example(features=tf.train.Features(feature={"images": tf.train.Feature(
        float_list=tf.train.FloatList(value=image))})).SerializeToString() for image in test_x[:5]]
    with tf.Graph().as_default(), tf.Session() as sess:
        signatures = tf.saved_model.loader.load(sess, ["serve"], parsing_dir).signature_def
        assert set(signatures) == {"serving_default", "classify", "regress"}
        classify, regress = signatures["classify"], signatures["regress"]
        assert classify.method_name == tf.saved_model.signature_constants.CLASSIFY_METHOD_NAME
        fetches = [classify.outputs["classes"], classify.outputs["scores"], regress.outputs["outputs"]]
        feed = {classify.inputs["inputs"].name: records}
        classes, scores, best = sess.run([info.name for info in fetches], feed)
    assert [int(c) for c in classes] == [e["class"] for e in expected]
    np.testing.assert_allclose(scores, [e["probabilities"] for e in expected], rtol=1e-6)
    np.testing.assert_allclose(best, np.max(scores, axis=1))


def test_export_mistakes_say_what_to_do(tmp_path):
    def two_outputs(features, mode):
        w = tf.get_variable("w", [], initializer=tf.ones_initializer())
        step = tf.assign_add(tf.train.get_global_step(), 1)
        y = features * w
        return tf.estimator.EstimatorSpec(mode, predictions=y, loss=tf.reduce_sum(y), train_op=step,
                                          export_outputs={"a": tf.estimator.export.PredictOutput(y),
                                                          "b": tf.estimator.export.RegressionOutput(y)})

    def serving_fn():
        x = tf.placeholder(tf.float32, [None], name="x")
        return tf.estimator.export.TensorServingInputReceiver(x, {"x": x})

    model = tf.estimator.Estimator(two_outputs, model_dir=str(tmp_path / "model"))
    with pytest.raises(ValueError, match="Couldn't find trained model at .*train it first"):
        model.export_savedmodel(str(tmp_path / "export"), serving_fn)
    model.train(lambda: tf.ones([2]), steps=1)
    with pytest.raises(ValueError, match="none of them is specified as the default"):
        model.export_savedmodel(str(tmp_path / "export"), serving_fn)
    with pytest.raises(TypeError, match="must return a tf.estimator.export.ServingInputReceiver"):
        model.export_savedmodel(str(tmp_path / "export"), lambda: {"x": tf.placeholder(tf.float32)})
    assert not (tmp_path / "export").exists()  # nothing half-written
    with pytest.raises(ValueError, match="ClassificationOutput classes must be a string tensor.*as_string"):
        tf.estimator.export.ClassificationOutput(classes=tf.constant([1]))


def test_a_receiver_of_lone_tensors_names_them_as_tf_does(tmp_path):
    """ServingInputReceiver(x, x): the model_fn gets {"feature": x}, the signature's input is
    "input"; keys that are not strings, or values that are not tensors, are refused."""
    seen = []

    def model_fn(features, mode):
        seen.append(sorted(features))
        w = tf.get_variable("w", [], initializer=tf.ones_initializer())
        y = features["feature"] * w
        return tf.estimator.EstimatorSpec(mode, predictions=y, loss=tf.reduce_sum(y),
                                          train_op=tf.assign_add(tf.train.get_global_step(), 1))

    def serving_fn():
        x = tf.placeholder(tf.float32, [None], name="x")
        return tf.estimator.export.ServingInputReceiver(x, x)

    model = tf.estimator.Estimator(model_fn, model_dir=str(tmp_path / "model"))
    model.train(lambda: {"feature": tf.ones([2])}, steps=1)
    predict_fn = tf.contrib.predictor.from_saved_model(model.export_savedmodel(str(tmp_path / "export"),
                                                                               serving_fn))
    assert seen[-1] == ["feature"]
    assert predict_fn({"input": np.array([2.0, 3.0], np.float32)})["output"].tolist() == [2.0, 3.0]
    with tf.Graph().as_default():
        x = tf.placeholder(tf.float32, [None])
        with pytest.raises(ValueError, match="feature keys must be strings, got 1"):
            tf.estimator.export.ServingInputReceiver({1: x}, x)
        with pytest.raises(ValueError, match="input 'x' must be a Tensor or SparseTensor, got"):
            tf.estimator.export.ServingInputReceiver(x, {"x": np.ones(2)})


def test_contrib_predictor_serves_an_export_or_an_estimator(digits, tmp_path):
    """tf.contrib.predictor, as serving scripts use it: a dict of the signature's inputs in, a
    dict of its outputs out, the same as Estimator.predict."""
    train_x, train_y, test_x, _ = digits
    model = tf.estimator.Estimator(digits_model_fn, model_dir=str(tmp_path / "model"),
                                   params={"hidden": 16, "learning_rate": 0.01})
    model.train(tf.estimator.inputs.numpy_input_fn({"images": train_x}, train_y, batch_size=64,
                                                   num_epochs=1, shuffle=True))
    expected = [e["class"] for e in model.predict(tf.estimator.inputs.numpy_input_fn(
        {"images": test_x[:5]}, shuffle=False))]
    raw_fn = tf.estimator.export.build_raw_serving_input_receiver_fn(
        {"images": tf.placeholder(tf.float32, [None, 64])})
    export_dir = model.export_savedmodel(str(tmp_path / "export"), raw_fn)
    predict_fn = tf.contrib.predictor.from_saved_model(export_dir)
    assert predict_fn({"images": test_x[:5]})["class"].tolist() == expected
    from_estimator = tf.contrib.predictor.from_estimator(model, raw_fn)
    assert from_estimator({"images": test_x[:5]})["class"].tolist() == expected
    with pytest.raises(ValueError, match="unexpected keys in input_dict: \\['image'\\]"):
        predict_fn({"image": test_x[:5]})
    with pytest.raises(ValueError, match='signature_def_key "classify". Available signatures are'):
        tf.contrib.predictor.from_saved_model(export_dir, signature_def_key="classify")
