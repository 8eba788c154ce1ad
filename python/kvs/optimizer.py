"""Optimizers the store runs, with MXNet's parameter names and defaults.

Each object only describes an optimizer: kv.set_optimizer(obj) sends its
spec() to the store, where the update rules live (kvs.h, kvs_set_optimizer,
says the formulas and the ranges the store accepts).
"""

from .kvstore import _number


class Optimizer:
    """The parameters every optimizer has (MXNet's Optimizer base)."""

    name = None

    def __init__(self, learning_rate, wd=0.0, rescale_grad=1.0, clip_gradient=None):
        self.learning_rate = learning_rate
        self.wd = wd
        self.rescale_grad = rescale_grad
        self.clip_gradient = clip_gradient

    def _params(self):
        params = [('lr', self.learning_rate), ('wd', self.wd), ('rescale_grad', self.rescale_grad)]
        if self.clip_gradient is not None:
            params.append(('clip_gradient', self.clip_gradient))
        return params

    def spec(self):
        """The spec string of kvs_set_optimizer: 'sgd lr=0.01 momentum=0.9 ...'."""
        return ' '.join([self.name] + ['%s=%s' % (k, _number(v, k)) for k, v in self._params()])

    def __repr__(self):
        return '%s(%s)' % (type(self).__name__, self.spec())


def _lazy(params, lazy_update):
    """lazy_update=0 in the spec when not lazy (lazy is the store's default)."""
    return params if lazy_update else params + [('lazy_update', 0)]


class SGD(Optimizer):
    """Stochastic gradient descent, with momentum when momentum > 0.
    lazy_update (MXNet's): row-sparse gradients update only their rows."""

    name = 'sgd'

    def __init__(self, learning_rate=0.01, momentum=0.0, wd=0.0, rescale_grad=1.0,
                 clip_gradient=None, lazy_update=True):
        super().__init__(learning_rate, wd, rescale_grad, clip_gradient)
        self.momentum = momentum
        self.lazy_update = lazy_update

    def _params(self):
        return _lazy(super()._params()[:1] + [('momentum', self.momentum)] +
                     super()._params()[1:], self.lazy_update)


class Adam(Optimizer):
    """Adam, with bias correction per key. lazy_update (MXNet's):
    row-sparse gradients update only their rows and their rows' state."""

    name = 'adam'

    def __init__(self, learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8, wd=0.0,
                 rescale_grad=1.0, clip_gradient=None, lazy_update=True):
        super().__init__(learning_rate, wd, rescale_grad, clip_gradient)
        self.beta1 = beta1
        self.beta2 = beta2
        self.epsilon = epsilon
        self.lazy_update = lazy_update

    def _params(self):
        return _lazy(super()._params()[:1] + [('beta1', self.beta1), ('beta2', self.beta2),
                                               ('epsilon', self.epsilon)] + super()._params()[1:],
                     self.lazy_update)
