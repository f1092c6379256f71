"""Convolutional nets built layer by layer from their shapes (the ResNet and VGG presets).

:class:`ConvNet` tracks the feature map of one sample and appends one :class:`Layer` per
convolution (with its batch norm) and per fully connected layer; pooling only changes the
shape.  Counts follow the conventions of :mod:`clustersim.model.presets` (fp32
activations: a layer's output elements).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .layers import Layer, Model
from .transformer import BACKWARD_FACTOR

ACTIVATION_BYTES_PER_VALUE = 4
"""Bytes of one stored activation value of a convolutional net (fp32)."""


def _layer(name: str, params: float, flops: float, activation_values: float) -> Layer:
    """A convolutional-net layer with the default backward cost and fp32 activations."""
    return Layer(
        name, params, flops, BACKWARD_FACTOR * flops, activation_values * ACTIVATION_BYTES_PER_VALUE
    )


@dataclass(frozen=True)
class Shape:
    """A feature map of one sample: channels x height x width."""

    channels: int
    height: int
    width: int

    @property
    def elements(self) -> int:
        return self.channels * self.height * self.width


def _out_size(size: int, kernel: int, stride: int, padding: int) -> int:
    """Output length of a convolution or pooling window along one axis."""
    return (size + 2 * padding - kernel) // stride + 1


@dataclass
class ConvNet:
    """Builds a convolutional net layer by layer, tracking the feature-map shape."""

    shape: Shape
    layers: list[Layer] = field(default_factory=list)

    def conv(
        self,
        name: str,
        out_channels: int,
        kernel: int,
        stride: int = 1,
        *,
        bias: bool = False,
        batch_norm: bool = True,
        source: Shape | None = None,
    ) -> Shape:
        """Append a convolution (padding kernel // 2) on ``source`` (default: the current map).

        Parameters: weights, bias if any, batch-norm scale and shift.
        FLOPs: 2 x multiply-adds.  Activations: the output elements.
        Returns the output shape, which becomes the current map.
        """
        src = source or self.shape
        pad = kernel // 2
        out = Shape(
            out_channels,
            _out_size(src.height, kernel, stride, pad),
            _out_size(src.width, kernel, stride, pad),
        )
        weights = src.channels * out_channels * kernel * kernel
        params = weights + (out_channels if bias else 0) + (2 * out_channels if batch_norm else 0)
        macs = weights * out.height * out.width
        self.layers.append(_layer(name, params, 2 * macs, out.elements))
        self.shape = out
        return out

    def pool(self, kernel: int, stride: int, padding: int = 0) -> Shape:
        """Max or average pooling: changes the shape, adds no layer (its cost is neglected)."""
        s = self.shape
        self.shape = Shape(
            s.channels,
            _out_size(s.height, kernel, stride, padding),
            _out_size(s.width, kernel, stride, padding),
        )
        return self.shape

    def fc(self, name: str, out_features: int) -> Shape:
        """Append a fully connected layer (with bias) on the flattened current map."""
        inputs = self.shape.elements
        self.layers.append(
            _layer(
                name, inputs * out_features + out_features, 2 * inputs * out_features, out_features
            )
        )
        self.shape = Shape(out_features, 1, 1)
        return self.shape

    def model(self, name: str) -> Model:
        return Model(name, tuple(self.layers))
