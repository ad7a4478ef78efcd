"""Listing 1 of the seed report ("Distributed TensorFlow" on Piz Daint): linear
regression, verbatim except for ``import dflow as tf`` and the last line, which
prints the learned weight (the data are y = 3x + noise, so it should be near 3).

    $ python examples/linear_regression.py
"""
# ruff: noqa - kept as the listing has it
import numpy as np
import dflow as tf

# ===== #
#                                LOAD DATA                                #
# ===== #
# Generate some data as  $y=3*x + \text{noise}$
N_SAMPLES = 10
x_in = np.arange(N_SAMPLES)
y_in = 3*x_in + np.random.randn(N_SAMPLES)
data = list(zip(x_in, y_in))

# ===== #
#                                BUILD GRAPH                                #
# ===== #
simple_graph = tf.Graph()
with simple_graph.as_default():
    # Generate placeholders for input x and output y
    x = tf.placeholder(tf.float32, name='x')
    y = tf.placeholder(tf.float32, name='y')

    # Create weight and bias, initialized to 0
    w = tf.Variable(0.0, name='weight')
    b = tf.Variable(0.0, name='bias')

    # Build model to predict y
    y_predicted = x * w + b

    # Use the square error as the loss function
    loss = tf.square(y - y_predicted, name='loss')

    # Use gradient descent to minimize loss
    optimizer = tf.train.GradientDescentOptimizer(learning_rate=0.001)
    train = optimizer.minimize(loss)

# ===== #
#                                EXECUTE GRAPH                                #
# ===== #
# Run training for N_EPOCHS epochs
N_EPOCHS = 5
with tf.Session(graph=simple_graph) as sess:
    # Initialize the necessary variables (w and b here)
    sess.run(tf.global_variables_initializer())

    # Train the model
    for i in range(N_EPOCHS):
        total_loss = 0
        for x_, y_ in data:
            # Session runs train operation and fetches values of loss
            _, l_value = sess.run([train, loss], feed_dict={x: x_, y: y_})
            total_loss += l_value
    print('Epoch {0}: {1}'.format(i, total_loss/N_SAMPLES))

    print('Learned weight: {0}  bias: {1}'.format(*sess.run([w, b])))
