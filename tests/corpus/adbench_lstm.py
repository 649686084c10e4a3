"""ADBench's LSTM objective (``lstm_objective``): l layers of hidden size b over a sequence of
c characters (one-hot-like vectors of b entries).

    main_params   2l × 4b   row 2i: layer i's weights, row 2i+1: its biases, each laid out as
                            [forget | ingate | outgate | change] blocks of b
    extra_params  3 × b     input weight, output weight, output bias
    state         2l × b    row 2i: layer i's hidden state, row 2i+1: its cell state
    sequence      c × b

Per layer (element-wise, as ADBench's model): forget = σ(in w_f + b_f), ingate = σ(h w_i + b_i),
outgate = σ(in w_o + b_o), change = tanh(h w_c + b_c); cell' = cell forget + ingate change;
hidden' = outgate tanh(cell').  The first layer's input is sequence[t] ⊙ in_weight, each next
layer's input the hidden state just computed; ypred = hidden_last ⊙ out_weight + out_bias.

The loss over t = 0 … c-2 is -Σ_t Σ_i sequence[t+1][i] (ypred[i] - lse) / ((c-1) b), with
ADBench's lse = log(Σ_i exp(ypred[i]) + 2) (its C++ adds 2 to the sum; its Python versions get
the same from ``sum(exp(ypred), 2)``).  The state (hidden and cell of every layer) is threaded
through the time steps and the layers: a fold over time whose state is the tuple (state matrix,
running total), and inside it a fold over layers whose state is (state matrix, layer output).
"""
import math

import numpy as np

import fsmooth as fs
from fsmooth import Array, Double, Index, build, ifold, length


@fs.kernel
def sigmoid(x: Double) -> Double:
    return 1.0 / (1.0 + fs.exp(-x))


@fs.kernel
def lstm_model(weight: Array[Double], bias: Array[Double], hidden: Array[Double],
               cell: Array[Double], inp: Array[Double]) -> tuple[Array[Double], Array[Double]]:
    b = length(hidden)
    new_cell = build(b, lambda i: cell[i] * sigmoid(inp[i] * weight[i] + bias[i])
                     + sigmoid(hidden[i] * weight[b + i] + bias[b + i])
                     * math.tanh(hidden[i] * weight[3 * b + i] + bias[3 * b + i]))
    new_hidden = build(b, lambda i: sigmoid(inp[i] * weight[2 * b + i] + bias[2 * b + i])
                       * math.tanh(new_cell[i]))
    return new_hidden, new_cell


@fs.kernel
def lstm_layer(main_params: Array[Array[Double]],
               st: tuple[Array[Array[Double]], Array[Double]],
               layer: Index) -> tuple[Array[Array[Double]], Array[Double]]:
    """Layer ``layer`` on (all states, this layer's input): the states with this layer's
    replaced, and this layer's output (its new hidden state)."""
    state, inp = st
    hidden, cell = lstm_model(main_params[2 * layer], main_params[2 * layer + 1],
                              state[2 * layer], state[2 * layer + 1], inp)
    new_state = build(length(state), lambda r: build(length(state[r]), lambda j: (
        hidden[j] if r == 2 * layer else (cell[j] if r == 2 * layer + 1 else state[r][j]))))
    return new_state, hidden


@fs.kernel
def lstm_predict(main_params: Array[Array[Double]], extra_params: Array[Array[Double]],
                 state: Array[Array[Double]], inp: Array[Double]
                 ) -> tuple[Array[Array[Double]], Array[Double]]:
    """(the new state, ypred) for one input."""
    b = length(inp)
    scaled = build(length(state[0]), lambda i: inp[i] * extra_params[0][i])  # a state's shape
    new_state, out = ifold(lambda st, layer: lstm_layer(main_params, st, layer),
                           (state, scaled), length(state) // 2)
    return new_state, build(b, lambda i: out[i] * extra_params[1][i] + extra_params[2][i])


@fs.kernel
def lstm_step(main_params: Array[Array[Double]], extra_params: Array[Array[Double]],
              sequence: Array[Array[Double]], st: tuple[Array[Array[Double]], Double],
              t: Index) -> tuple[Array[Array[Double]], Double]:
    state, total = st
    new_state, ypred = lstm_predict(main_params, extra_params, state, sequence[t])
    b = length(ypred)
    lse = fs.log(ifold(lambda acc, i: acc + fs.exp(ypred[i]), 0.0, b) + 2.0)
    return new_state, total + ifold(lambda acc, i: acc + sequence[t + 1][i] * (ypred[i] - lse),
                                    0.0, b)


@fs.kernel
def lstm_objective(main_params: Array[Array[Double]], extra_params: Array[Array[Double]],
                   state: Array[Array[Double]], sequence: Array[Array[Double]]) -> Double:
    c = length(sequence)
    b = length(sequence[0])
    final_state, total = ifold(lambda st, t: lstm_step(main_params, extra_params, sequence, st, t),
                               (state, 0.0), c - 1)
    return -total / ((c - 1) * b)


# ----------------------------------------------------------------------------- numpy oracles

def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def np_sigmoid(x):
    return float(_sigmoid(x))


def np_lstm_model(weight, bias, hidden, cell, inp):
    gates = np.concatenate([inp, hidden, inp, hidden]) * weight + bias
    forget, ingate, outgate, change = np.split(gates, 4)
    new_cell = cell * _sigmoid(forget) + _sigmoid(ingate) * np.tanh(change)
    return _sigmoid(outgate) * np.tanh(new_cell), new_cell


def np_lstm_layer(main_params, st, layer):
    state, inp = st
    h, c = np_lstm_model(main_params[2 * layer], main_params[2 * layer + 1],
                         state[2 * layer], state[2 * layer + 1], inp)
    new_state = state.copy()
    new_state[2 * layer], new_state[2 * layer + 1] = h, c
    return new_state, h


def np_lstm_predict(main_params, extra_params, state, inp):
    new_state = state.copy()
    x = inp * extra_params[0]
    for layer in range(len(state) // 2):
        h, c = np_lstm_model(main_params[2 * layer], main_params[2 * layer + 1],
                             state[2 * layer], state[2 * layer + 1], x)
        new_state[2 * layer], new_state[2 * layer + 1] = h, c
        x = h
    return new_state, x * extra_params[1] + extra_params[2]


def np_lstm_step(main_params, extra_params, sequence, st, t):
    state, total = st
    new_state, ypred = np_lstm_predict(main_params, extra_params, state, sequence[t])
    ynorm = ypred - np.log(np.sum(np.exp(ypred)) + 2.0)
    return new_state, float(total + sequence[t + 1] @ ynorm)


def np_lstm_objective(main_params, extra_params, state, sequence):
    c, b = sequence.shape
    ypreds = []
    for t in range(c - 1):
        state, ypred = np_lstm_predict(main_params, extra_params, state, sequence[t])
        ypreds.append(ypred)
    ypred = np.array(ypreds).reshape(c - 1, b)
    ynorm = ypred - np.log(np.exp(ypred).sum(axis=1, keepdims=True) + 2.0)
    return float(-np.sum(sequence[1:] * ynorm) / ((c - 1) * b))
