"""Image-wide properties: a per-image statistic and a transfer that gives an image other values of it.

Everything works on pixels (B, C, H, W) in [0, 1] (:class:`PixelSpace` maps the model's inputs there
and back) in float64. Each property of :data:`PROPERTIES` (keyed by :data:`PropertyName`) has

- ``statistic(pixels) -> (B, S)``: its S numbers per image;
- ``transfer(pixels, targets (B, S), draws) -> pixels``: the images given those statistics (``draws``: the random
  draws, one generator for the batch or a seed per image, :class:`ImageSeeds`). The
  result's statistic equals ``targets`` up to rounding wherever the property can reach them (the
  exceptions below), before :meth:`PixelSpace.inputs` clamps the pixels to their range.

Luminance Y is ``0.299 R + 0.587 G + 0.114 B`` (Rec. 601) for 3 channels, the mean over channels
otherwise (the channel itself for greyscale).

- ``colour`` (3 channels only): the image's chromaticity, the medians over its pixels of the two chromatic
  channels α and β of Reinhard et al.'s (2001) decorrelated lαβ space (RGB -> LMS -> log10 -> lαβ); the
  transfer is Reinhard's shift restricted to them: α and β shifted to the target medians, l and every
  spread kept, then back to RGB (a stain's or a white balance's cast, without the brightness).
- ``hue`` (3 channels only): the angle (turns) of the image's lαβ chroma ``α + iβ`` summed with weights ``|c| **``
  :data:`HUE_POWER`, the most chromatic pixels' hue (in a stained slide, the cells'); the transfer rotates every
  pixel's chroma about grey by the difference (exact). A hue rotation barely moves the medians ``colour`` reads,
  which sit on the pale background. Not in the signature: given there, the chroma's rotation to a donor's hue lost
  a halved saturation's three learned flags and two of a white balance's, on the same weights. Where the classes'
  objects differ by their colour (planted shapes: a class is its square's colour), a class's hue is what the class
  is and a model rightly reads it: leave ``hue`` out of the properties named there.
- ``brightness``: the median of Y; the transfer adds the same change to every channel.

What most pixels share, not what the object adds or how much the image varies: acquisition (a stain, a
white balance, illumination) shifts every pixel and so the medians, while an object's colour moves a
minority of pixels (the mean, not the median) and the spreads (contrast, saturation) follow what the
image shows. Means and spreads flagged classes of clean models whose objects or images really differ
(docs/discovery.md, *Global properties*).
- ``sharpness``: the share of Y's energy (mean removed) at spatial frequencies of at least
  :data:`HIGH_FREQUENCY` cycles per pixel. To lower it the transfer defocuses: a Gaussian blur of every channel
  (in the Fourier domain) as wide as brings the share to the target (by bisection, at most :data:`MAX_BLUR` px),
  as a lens out of focus does to every frequency at once. Scaling only the high band (a < 1) reached the share
  but left the middle frequencies of a 3 px defocus in place: on BloodMNIST models that had learned one it flipped
  no other class's image to the defocused class, where the defocus itself flipped 32-52 % and the matched Gaussian
  30-46 %. To raise it the transfer multiplies those frequencies of every channel by
  ``a = sqrt(r_t E_low / ((1 - r_t) E_high))``, at most :data:`MAX_GAIN` (an image without high frequencies
  cannot be sharpened).
- ``noise``: the RMS form of Immerkær's (1996) estimate of white noise, ``sigma = rms(Y * N) / 6``
  over the valid part of the convolution with N = [[1, -2, 1], [-2, 4, -2], [1, -2, 1]] (which
  ignores planes and ramps; for white noise of deviation s, E[(N * n)^2] = 36 s^2). To raise it,
  white noise ``t * eps`` (eps standard normal, independent per channel, from ``draws``) is
  added (its sign chosen so that the smallest t reaches the target); to lower it, the image is blended
  towards its 3 x 3 binomial smoothing,
  ``x - u (x - S x)``, u in [0, 1] (what u = 1 cannot remove stays). t and u solve a quadratic:
  the statistic is exact.
- ``compression``: JPEG's blockiness, the mean absolute difference of Y across the 8 x 8 blocks' boundaries over
  the sum of it and that inside them (about 0.5 for an image never compressed, 0.67 at JPEG quality 10 on 28 px
  BloodMNIST); the transfer encodes the image as a JPEG (8 bits; RGB as colour, other channel counts each as
  greyscale) at the quality of :data:`JPEG_QUALITIES`, highest first, whose blockiness first reaches the target
  (the blockiest tried, if none does); an image above its target less :data:`JPEG_TOLERANCE` is left as it is
  (compression cannot be undone, and a smaller step is under what the highest quality adds). Site-to-site
  compression differs this way, and no other statistic sees it: JPEG's blocks and lost detail barely move the
  medians, the high-frequency share or the noise estimate.
- ``tone`` (3 channels, bright-field colour images): the background's optical density, ``-mean_c log10 q_c``
  with ``q_c`` channel c's :data:`BACKGROUND_QUANTILE` quantile (the brightest 5 % of a bright-field image: the
  glass and plasma between the cells, which only acquisition colours; 0 for a white background); the transfer
  raises every channel to one power per image (a gamma), ``g = target / current``, exact because a quantile
  commutes with ``x ** g`` (within [1 / :data:`MAX_GAMMA`, :data:`MAX_GAMMA`]; an image with a white background
  is left as it is). A gamma, a gain or a darkening moves the background's density, which the classes' content
  does not: the cells' medians can stay where another class's are (a gamma of 0.7 brightens the darker
  monocytes to the others' median luminance), while the background's density changes by the gamma's factor.
  In dark-field or fluorescence images the brightest pixels are the objects, not the background: there the
  statistic is content; hence RGB only (a greyscale X-ray, CT or MRI image's brightest pixels are anatomy),
  though the statistic and the transfer take any channel count.
- ``registration`` (3 channels): how far the first and the last channel are displaced from the middle one (x and y,
  pixels; :func:`channel_displacement`: the peak of the cross-correlation of the channels' edge strengths, refined
  to a fraction of a pixel), about 0 in any in-register image whatever it shows, and how much larger each shows the
  content (:func:`channel_magnification`: the displacement of the right half less the left half's, and the bottom's
  less the top's, over the distance between them); the transfer magnifies the two channels by the ratio (bilinear,
  edges repeated), then moves them by the difference (a phase ramp in the Fourier domain, edges repeated), to about a
  tenth of a pixel. A lens's lateral chromatic aberration (a displacement, or a magnification that parts the channels
  more the farther from the centre) or a scanner's channels out of step move it; no statistic of one channel's
  values sees it. On BloodMNIST validation images every class's mean magnification lies within 0.015 of 0 (standard
  deviation 0.006 at most); red 12 % larger and blue 12 % smaller measures 0.14 and -0.15.
- ``stripes``: a pattern along the image's rows or columns, from Y: how much brighter the even rows are than the odd
  ones (``2 (m_even - m_odd) / (m_even + m_odd)``, signed), the same for columns, and the shares of the energy in a
  finer pattern of rows and of columns (one value per line, at :data:`STRIPE_FREQUENCY` cycles per pixel or more,
  below the alternation's 0.5); the transfer gives the alternation by a gain on even lines against odd ones (a line
  sensor's uneven gains; exact), and the finer patterns by a gain on their frequencies (the image's own phase).
  The alternation is signed because which lines are the darker ones is what a model reads: on one banded BloodMNIST
  model a gain on the recipient's own alternation (an energy share, its sign as often the wrong one) flipped 22-47 %
  of the recipients the banding itself flips 93 % of, the signed alternation 100 % (docs/results/discovery.md).
  The finer patterns keep the recipient's phase: a stripe of 4 px period is given at the wrong offset as often as
  not (found by the signature, not alone).
- ``interlacing``: how far the odd rows are displaced to the right of the even ones, and the odd columns down from
  the even ones (pixels, from Y; the peak of the cross-correlation of the two fields' horizontal edge strengths,
  refined to a fraction of a pixel): about 0 for an image taken in one pass (BloodMNIST: class means within 0.03 px,
  standard deviations 0.05-0.13 px), the fields' offset for interlaced video or a bidirectional scan out of step;
  the transfer moves the odd rows (then the odd columns) by the difference. A row's mean does not move when its
  content moves sideways, so ``stripes`` does not see it, and every channel moves alike, so ``registration`` does not.
- ``fixed_pattern``: each row's and each column's own brightness, a sensor's fixed-pattern noise (a line sensor's or a
  CMOS column amplifier's uneven gains): the profile of the row means of Y over the image's mean, less 1, without its
  frequencies under :data:`LINE_FREQUENCY` cycles per pixel (which the content fills), and the same of the columns:
  H + W numbers, the only property whose size is the image's (``lines``). The transfer multiplies every channel's
  lines by ``(1 + target) / (1 + own)`` (rows, then columns, :data:`_LINE_ROUNDS` times: the statistic within 1e-5
  of the target on textures). The pattern itself is what moves, phase included: ``stripes``' finer-pattern shares
  say how much of it there is, and a gain on the recipient's own pattern gave two models that had learned one
  sensor's column gains a suspicion of 0.02 (its pattern is the sensor's, not a share). Not in the signature, so
  tested for every class: given in the signature too, a donor's profile found the same sensor's gains there, but the
  signature then lost two learned flags it had found (a radial aberration's, a halved saturation's) on the same
  weights; given together with the tone and the compression (one more joint test, as a gate), it halved the tone's
  flips on a white balance and the pattern's on the sensor (0.61 to 0.30, 0.45 to 0.23).
- ``illumination``: how unevenly the field is lit, a lamp or condenser off the optical axis: the least-squares slopes of
  Y over its mean, less 1, against x and y (from -1 at the left and top edge to 1 at the right and bottom); the transfer
  multiplies every channel by ``1 + dx x + dy y`` (``d`` what is missing, :data:`_ILLUMINATION_ROUNDS` times: within
  0.0011 of the target on BloodMNIST). BloodMNIST's classes (cells in the middle; 800 validation images) have mean
  slopes within 0.02 of 0 from left to right and -0.07 to 0 from top to bottom (its images are a little brighter at the
  top), standard deviations 0.04-0.09; light 35 % stronger on one side than in the middle reads 0.40. The medians and
  the fine line profiles leave a slope out, and a vignette (symmetric) has none. Content on one side of the image (an
  object always to the left) reads as a slope too. Not in the signature, so tested for every class: given there too, it
  found the same slope but lost a learned radial aberration's and a halved saturation's flags on the same weights.
- ``mosaic`` (3 channels): a colour camera's filter mosaic: each channel's mean over each pixel of the image's 2 x 2
  blocks (even or odd row, even or odd column) over the channel's mean, less 1, 12 numbers; about 0 in any image
  taken without one's trace (BloodMNIST's 1,712 validation images: class means within 0.002 of 0, standard deviations
  0.005 at most), 0.07 either way for the green of a Bayer filter whose blue rows' green pixels are 15 % brighter
  (their cross-talk) once demosaiced. The transfer multiplies each pixel of a channel's blocks by
  ``(1 + target) / (1 + own)`` (exact; within [1 / :data:`MAX_MOSAIC_GAIN`, :data:`MAX_MOSAIC_GAIN`]). Relative to the
  channel's mean, it leaves the colour to ``colour``: three BloodMNIST models that had learned that filter on one class
  read the pattern and the green it adds together: at their 7 learned epoch ends the pattern alone flipped 0-23 % of
  the recipients (the filter itself 46-89 % at 4 of them), the signature without it 0-68 %, the signature with it
  79-98 % (beyond the control's flips, every recipient). Hence part of the signature, not tested alone for every
  class.
- ``signature`` (3 channels): the image-wide signature, every statistic above but the hue, the blockiness, the tone, the
  fixed pattern and the illumination at once (α, β, Y's median, the high-frequency share, the noise estimate, the
  channels' displacements and magnifications, the stripes, the fields' displacements, the mosaic); the transfer applies
  registration, interlacing, noise, sharpness, stripes, mosaic, colour and brightness in turn (brightness last: it is
  exact, the others to within what the later transfers move them).
  Acquisition (a stain, a white balance, a gain) moves several statistics at once, and a model may need all of
  them: giving one at a time then flips nothing. Compression stays a property of its own: JPEG-encoding the
  recipients together with the other transfers flipped a young planted-shapes model's recipients to a class
  that really differs in brightness (signature suspicion 0.42 against 0.4), which the signature without it
  did not. The tone stays out too: it reads the background, which the medians of cells do not.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, get_args

import torch
import torch.nn.functional as F
import torchvision.transforms.v2.functional as TF
from torch import Tensor

from gradskip_lightning.core.normalisation import Normalisation

__all__ = [
    "PROPERTIES",
    "PROPERTY_NAMES",
    "Draws",
    "GlobalProperty",
    "ImageSeeds",
    "PixelSpace",
    "PropertyName",
    "SIGNATURE_PARTS",
    "draw",
    "luminance",
]

PropertyName = Literal[
    "colour",
    "hue",
    "brightness",
    "sharpness",
    "noise",
    "compression",
    "tone",
    "registration",
    "stripes",
    "interlacing",
    "fixed_pattern",
    "illumination",
    "mosaic",
    "signature",
]
PROPERTY_NAMES: tuple[PropertyName, ...] = get_args(PropertyName)

#: Spatial frequency (cycles per pixel) from which ``sharpness`` counts energy as high: a defocus takes energy from
#: the middle frequencies too, which the previous cut-off, half the Nyquist limit (0.25), did not count.
HIGH_FREQUENCY = 0.1
#: The largest factor ``sharpness`` multiplies the high frequencies by.
MAX_GAIN = 4.0
#: The widest defocus (a Gaussian's standard deviation, pixels) the ``sharpness`` transfer blurs by.
MAX_BLUR = 8.0
_BISECTIONS = 32  # halvings of the defocus's width: to 8 px / 2^32
#: JPEG's block side in pixels, where ``compression`` looks for boundaries.
JPEG_BLOCK = 8
#: The JPEG qualities the ``compression`` transfer tries, highest first (on BloodMNIST each raises the median
#: blockiness by about 0.02, 0.04, 0.07, 0.10, 0.11, 0.14, 0.18, 0.22).
JPEG_QUALITIES = (75, 50, 30, 20, 15, 10, 7, 5)
#: The blockiness below its target by which the ``compression`` transfer leaves an image as it is: under what the
#: highest quality tried adds (and within BloodMNIST's spread of uncompressed images: 0.44-0.59, 5th-95th percentile).
JPEG_TOLERANCE = 0.02
#: The quantile of each channel's pixels ``tone`` reads as the background (bright-field: the brightest 5 %).
BACKGROUND_QUANTILE = 0.95
#: The largest factor by which the ``tone`` transfer scales the background's density (a gamma in [1/5, 5]).
MAX_GAMMA = 5.0
#: The darkest pixel value ``tone`` takes the logarithm of (black pixels).
TONE_FLOOR = 1e-4
#: The smallest LMS value before the logarithm of ``colour`` (black pixels).
LMS_FLOOR = 1e-4
#: The power of a pixel's chroma in its weight for ``hue`` (the stained cells', not the pale background's): on two
#: BloodMNIST models that had learned a hue rotation, the class's hue flipped 89 % and 82 % of the recipients (a third
#: class's: 0 %), with weight 1 (the chroma's power 1 in the sum) 71 % and 73 %; the HSV hue weighted by its
#: saturation 7-11 % (third class 32 %), by its fourth power 54-59 %; clean models' classes at most 9 % beyond their
#: controls.
HUE_POWER = 3
#: The largest displacement (pixels, each axis) ``registration`` and ``interlacing`` search for between two channels or
#: two fields.
MAX_SHIFT = 3
#: The largest factor by which the ``registration`` transfer magnifies or shrinks a channel.
MAX_MAGNIFICATION = 1.25
#: Replicated border (pixels) at the ends of a line that a transfer moves (``registration``, ``interlacing``), so
#: that no edge wraps round.
SHIFT_BORDER = 4
#: Spatial frequency (cycles per pixel) from which ``stripes`` counts a row's or a column's pattern.
STRIPE_FREQUENCY = 0.25
#: The largest factor ``stripes`` multiplies a finer pattern by (one the image barely has cannot be raised much).
MAX_STRIPE_GAIN = 16.0
_ALTERNATION_ROUNDS = 4  # rows and columns given their alternation in turn: the coupling shrinks to rounding
#: Spatial frequency (cycles per pixel) from which ``fixed_pattern`` reads a line profile: on two BloodMNIST models that
#: had learned one sensor's column gains (10 %), a donor's profile from 0.1 flipped 73 % and 54 % of the recipients
#: to the class (a third class's: 0 % and 4 %), from 0 (the whole profile, the cells' too) 62 % and 66 %, with a
#: class the content tells apart flipping 48 % against 34 % on a clean one, and from 0.25 only 23 % and 12 %.
LINE_FREQUENCY = 0.1
#: The largest factor by which the ``fixed_pattern`` transfer brightens or darkens a line.
MAX_LINE_GAIN = 2.0
_LINE_ROUNDS = 4  # rows and columns given their profile in turn: each moves the other's a little
#: The largest factor by which the ``illumination`` transfer brightens or darkens a pixel.
MAX_ILLUMINATION_GAIN = 2.0
_ILLUMINATION_ROUNDS = 4  # the gain moves the image's mean, and so the slopes, a little: each round closes most of it
#: The largest factor by which the ``mosaic`` transfer brightens or darkens one pixel of a channel's 2 x 2 block.
MAX_MOSAIC_GAIN = 2.0
#: The name under which a log shows a line profile: the deviation (root mean square) of a class's mean profile.
LINE_DEVIATION = "deviation"

_RGB_TO_LMS = torch.tensor(
    [[0.3811, 0.5783, 0.0402], [0.1967, 0.7244, 0.0782], [0.0241, 0.1288, 0.8444]], dtype=torch.float64
)
_LOG_LMS_TO_LAB = torch.diag(torch.tensor([3.0, 6.0, 2.0], dtype=torch.float64).rsqrt()) @ torch.tensor(
    [[1.0, 1.0, 1.0], [1.0, 1.0, -2.0], [1.0, -1.0, 0.0]], dtype=torch.float64
)
_REC601 = (0.299, 0.587, 0.114)
#: The names of RGB images' channels, in order.
RGB_CHANNELS = ("red", "green", "blue")
_NOISE_KERNEL = torch.tensor([[1.0, -2.0, 1.0], [-2.0, 4.0, -2.0], [1.0, -2.0, 1.0]], dtype=torch.float64)
_SMOOTHING = torch.outer(*[torch.tensor([1.0, 2.0, 1.0], dtype=torch.float64) / 4] * 2)


@dataclass(frozen=True)
class ImageSeeds:
    """One seed per image of a batch: each image's random draws are its own, whatever batch it is in and
    whatever was drawn before it.

    Attributes:
        seeds: (B,) int64.
    """

    seeds: Tensor

    def generator(self, index: int) -> torch.Generator:
        """Image ``index``'s generator (on the CPU)."""
        return torch.Generator().manual_seed(int(self.seeds[index]))


#: A transfer's random draws: one generator for the batch (None: the global one), or one seed per image.
Draws = torch.Generator | ImageSeeds | None


def draw(
    shape: tuple[int, ...],
    draws: Draws,
    sample: Callable[..., Tensor] = torch.randn,
    dtype: torch.dtype = torch.float64,
) -> Tensor:
    """Values of ``sample`` (``torch.randn``, ``torch.rand``) of ``shape`` (B, ...) on the CPU: from one generator, or
    each image's from its own seed.

    Example:
        >>> seeds = ImageSeeds(torch.tensor([7, 8]))
        >>> torch.equal(draw((2, 3), seeds)[1], draw((1, 3), ImageSeeds(torch.tensor([8])))[0])  # its own draws
        True
    """
    if not isinstance(draws, ImageSeeds):
        return sample(shape, generator=draws, dtype=dtype)
    if len(draws.seeds) != shape[0]:
        raise ValueError(f"{len(draws.seeds)} image seeds for {shape[0]} images")
    if not shape[0]:
        return torch.empty(shape, dtype=dtype)
    return torch.stack([sample(shape[1:], generator=draws.generator(k), dtype=dtype) for k in range(shape[0])])


@dataclass(frozen=True)
class GlobalProperty:
    """One image-wide property (module docstring).

    Attributes:
        name: its :data:`PropertyName`.
        what: what it is, in words, for messages ("colour statistics").
        statistics: names of its per-image numbers (a line property's: of those before its line profile).
        channels: the channel count it needs (None: any).
        statistic: pixels (B, C, H, W) -> (B, S) float64.
        transfer: (pixels (B, C, H, W), targets (B, S), draws) -> pixels (B, C, H, W) float64.
        lines: its statistic ends in a line profile, one number per row and per column of the image (H + W more).
        angle: its statistics are angles in turns (period 1), averaged and compared on the circle.
    """

    name: PropertyName
    what: str
    statistics: tuple[str, ...]
    channels: int | None
    statistic: Callable[[Tensor], Tensor]
    transfer: Callable[[Tensor, Tensor, Draws], Tensor]
    lines: bool = False
    angle: bool = False

    def applies(self, channels: int) -> bool:
        """Whether images of ``channels`` channels have this property."""
        return self.channels is None or self.channels == channels

    def size(self, height: int, width: int) -> int:
        """S, its numbers per image of ``height`` x ``width`` pixels."""
        return len(self.statistics) + (height + width if self.lines else 0)

    @property
    def summary_names(self) -> tuple[str, ...]:
        """The names of what a log shows of it (:meth:`summary`)."""
        return (*self.statistics, LINE_DEVIATION) if self.lines else self.statistics

    def summary(self, statistics: Tensor) -> dict[str, float]:
        """What a log shows of images' statistics (n, S): the mean of each named one, and of a line profile the
        deviation (root mean square) of their mean profile (:data:`LINE_DEVIATION`).

        Example:
            >>> profiles = torch.tensor([[0.1, -0.1, 0.3, -0.3], [0.1, -0.1, 0.1, -0.1]], dtype=torch.float64)
            >>> PROPERTIES["fixed_pattern"].summary(profiles)  # the mean profile (0.1, -0.1, 0.2, -0.2)
            {'deviation': 0.15811388300841897}
        """
        means = circular_mean(statistics) if self.angle else statistics.mean(dim=0)
        named = dict(zip(self.statistics, means[: len(self.statistics)].tolist(), strict=True))
        if self.lines:
            named[LINE_DEVIATION] = float(means[len(self.statistics) :].square().mean().sqrt())
        return named


@dataclass(frozen=True)
class PixelSpace:
    """The model inputs' :class:`~gradskip_lightning.core.normalisation.Normalisation` (inputs to pixels and back)
    and the pixel range transfers are clamped to.

    Attributes:
        normalisation: the normalisation the model's inputs carry.
        low, high: (C,) float64 the range of pixels a transfer may produce.
    """

    normalisation: Normalisation
    low: Tensor
    high: Tensor

    @classmethod
    def of(cls, images: Tensor, normalisation: Normalisation | None) -> PixelSpace:
        """The pixel space of ``images`` (P, C, H, W) normalised with ``normalisation`` (1 or C values); without
        one, each channel's range over ``images`` becomes [0, 1].

        Transfers are clamped to [0, 1], widened to the pixels the images hold (a normalisation that
        leaves values outside, or images shifted outside, keep them reachable).

        Example:
            >>> space = PixelSpace.of(torch.tensor([[[[-1.0, 1.0]]]]), Normalisation((0.5,), (0.5,)))
            >>> space.pixels(torch.tensor([[[[-1.0, 1.0]]]])).tolist(), space.low.tolist(), space.high.tolist()
            ([[[[0.0, 1.0]]]], [0.0], [1.0])
        """
        channels = images.shape[1]
        values = images.detach().double().transpose(0, 1).flatten(1)  # (C, P * H * W)
        if normalisation is None:
            low, high = values.amin(dim=1), values.amax(dim=1)
            span = torch.where(high > low, high - low, torch.ones_like(high))
            normalisation = Normalisation(mean=tuple((-low / span).tolist()), std=tuple((1 / span).tolist()))
        normalisation.check_channels(channels)
        pixels = normalisation.to_pixels(values[:, :, None]).flatten(1)
        device = images.device
        low = pixels.amin(dim=1).clamp(max=0.0)
        high = pixels.amax(dim=1).clamp(min=1.0)
        return cls(normalisation, low.to(device), high.to(device))

    @property
    def channels(self) -> int:
        """The channels of the images it maps."""
        return len(self.low)

    def to(self, device: torch.device | str) -> PixelSpace:
        """The same space with its tensors on ``device``."""
        return PixelSpace(self.normalisation, self.low.to(device), self.high.to(device))

    def pixels(self, images: Tensor) -> Tensor:
        """Pixels (B, C, H, W) float64 of model inputs."""
        return self.normalisation.to_pixels(images.double())

    def inputs(self, pixels: Tensor, dtype: torch.dtype) -> Tensor:
        """Model inputs of ``dtype`` from pixels (B, C, H, W), clamped to [low, high] per channel first."""
        clamped = torch.maximum(torch.minimum(pixels, self.high[:, None, None]), self.low[:, None, None])
        return self.normalisation.from_pixels(clamped).to(dtype)


def _luminance_weights(channels: int, like: Tensor) -> Tensor:
    """(C,) weights summing to 1: Rec. 601 for 3 channels, uniform otherwise."""
    weights = _REC601 if channels == 3 else (1 / channels,) * channels
    return torch.tensor(weights, dtype=like.dtype, device=like.device)


def luminance(pixels: Tensor) -> Tensor:
    """Luminance (B, H, W) of pixels (B, C, H, W) (module docstring).

    Example:
        >>> round(luminance(torch.ones(1, 3, 1, 1)).item(), 6), luminance(torch.full((1, 1, 1, 1), 0.25)).item()
        (1.0, 0.25)
    """
    return torch.einsum("bchw,c->bhw", pixels, _luminance_weights(pixels.shape[1], pixels))


# ----------------------------------------------------------------------------- colour


def _check_rgb(pixels: Tensor, name: PropertyName = "colour") -> None:
    if pixels.shape[1] != 3:
        raise ValueError(f"{name} needs RGB images (3 channels); got {pixels.shape[1]}")


def _to_lab(pixels: Tensor) -> Tensor:
    """(B, 3, n) lαβ values of RGB pixels (B, 3, H, W)."""
    lms = torch.einsum("ij,bjn->bin", _RGB_TO_LMS.to(pixels), pixels.flatten(2))
    return torch.einsum("ij,bjn->bin", _LOG_LMS_TO_LAB.to(pixels), lms.clamp(min=LMS_FLOOR).log10())


def _from_lab(lab: Tensor, shape: torch.Size) -> Tensor:
    """RGB pixels of ``shape`` (B, 3, H, W) from lαβ values (B, 3, n)."""
    log_lms = torch.einsum("ij,bjn->bin", torch.linalg.inv(_LOG_LMS_TO_LAB).to(lab), lab)
    return torch.einsum("ij,bjn->bin", torch.linalg.inv(_RGB_TO_LMS).to(lab), 10**log_lms).reshape(shape)


def colour_statistic(pixels: Tensor) -> Tensor:
    """(B, 2): the medians of α and β (the chromaticity most pixels share) of RGB pixels (B, 3, H, W); 0 for grey.

    Example:
        >>> images = torch.rand(2, 3, 4, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
        >>> given = colour_transfer(images[:1], colour_statistic(images[1:]))  # image 0 with image 1's colour
        >>> torch.allclose(colour_statistic(given), colour_statistic(images[1:]))
        True
    """
    _check_rgb(pixels)
    return _to_lab(pixels)[:, 1:].median(dim=2).values


def colour_transfer(pixels: Tensor, targets: Tensor, draws: Draws = None) -> Tensor:
    """RGB pixels (B, 3, H, W) with their α and β shifted to the medians ``targets`` (B, 2)."""
    _check_rgb(pixels)
    lab = _to_lab(pixels)
    shift = torch.cat([torch.zeros_like(targets[:, :1]), targets - lab[:, 1:].median(dim=2).values], dim=1)
    return _from_lab(lab + shift[:, :, None], pixels.shape)


# ----------------------------------------------------------------------------- hue


def _chroma(lab: Tensor) -> Tensor:
    """(B, n) complex: the chroma ``α + iβ`` of lαβ values (B, 3, n)."""
    return torch.complex(lab[:, 1], lab[:, 2])


def _hue_angle(chroma: Tensor) -> Tensor:
    """(B,): the angle (turns, in (-0.5, 0.5]) of the chroma (B, n) summed with weights ``|c| ** HUE_POWER``."""
    return torch.angle((chroma.abs() ** HUE_POWER * chroma).sum(dim=1)) / (2 * math.pi)


def circular_mean(angles: Tensor) -> Tensor:
    """(S,): the circular mean of angles (n, S) in turns, in (-0.5, 0.5].

    Example:
        >>> circular_mean(torch.tensor([[0.49], [-0.49]], dtype=torch.float64)).abs().tolist()  # not 0
        [0.5]
    """
    turned = 2 * math.pi * angles
    return torch.atan2(turned.sin().mean(dim=0), turned.cos().mean(dim=0)) / (2 * math.pi)


def _wrapped(turns: Tensor) -> Tensor:
    """Angle differences in turns wrapped to [-0.5, 0.5): the shorter way round."""
    return torch.remainder(turns + 0.5, 1.0) - 0.5


def centred_angles(angles: Tensor) -> Tensor:
    """Angles (n, S) in turns less their :func:`circular_mean`, wrapped to [-0.5, 0.5): a line on which angles
    within half a turn of their mean keep their distances (a hue's branch cut falls far from them).

    Example:
        >>> centred_angles(torch.tensor([[0.49], [-0.49]], dtype=torch.float64)).flatten().tolist()
        [-0.010000000000000009, 0.010000000000000009]
    """
    return _wrapped(angles - circular_mean(angles))


def hue_statistic(pixels: Tensor) -> Tensor:
    """(B, 1): the hue of RGB pixels (B, 3, H, W), in turns: the angle of their lαβ chroma ``α + iβ`` summed with
    weights ``|c| ** HUE_POWER`` (the most chromatic pixels': in a stained slide the cells); 0 for grey.

    Example:
        >>> images = torch.rand(2, 3, 4, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
        >>> given = hue_transfer(images[:1], hue_statistic(images[1:]))  # image 0 with image 1's hue
        >>> torch.allclose(hue_statistic(given), hue_statistic(images[1:]))
        True
    """
    _check_rgb(pixels, "hue")
    return _hue_angle(_chroma(_to_lab(pixels)))[:, None]


def hue_transfer(pixels: Tensor, targets: Tensor, draws: Draws = None) -> Tensor:
    """RGB pixels (B, 3, H, W) whose hue is ``targets`` (B, 1): every pixel's chroma rotated about grey by the
    difference (the shorter way round; its magnitude, l and so every weight kept: exact)."""
    _check_rgb(pixels, "hue")
    lab = _to_lab(pixels)
    chroma = _chroma(lab)
    turn = _wrapped(targets[:, 0] - _hue_angle(chroma))
    rotated = chroma * torch.exp(2j * math.pi * turn)[:, None]
    return _from_lab(torch.stack([lab[:, 0], rotated.real, rotated.imag], dim=1), pixels.shape)


# ----------------------------------------------------------------------------- brightness


def brightness_statistic(pixels: Tensor) -> Tensor:
    """(B, 1): the median luminance of pixels (B, C, H, W) (the lower of the two middle values for an even count).

    Example:
        >>> brightness_statistic(torch.tensor([[[[0.2, 0.6, 0.3]]]], dtype=torch.float64)).tolist()
        [[0.3]]
    """
    return luminance(pixels).flatten(1).median(dim=1).values[:, None]


def brightness_transfer(pixels: Tensor, targets: Tensor, draws: Draws = None) -> Tensor:
    """Pixels (B, C, H, W) whose median luminance is ``targets`` (B, 1): the change added to every channel."""
    return pixels + (targets[:, 0] - brightness_statistic(pixels)[:, 0])[:, None, None, None]


# ----------------------------------------------------------------------------- sharpness


def _squared_frequencies(height: int, width: int, device: torch.device) -> Tensor:
    """(H, W) float64: each FFT bin's squared spatial frequency, in cycles per pixel squared."""
    rows = torch.fft.fftfreq(height, device=device, dtype=torch.float64)[:, None]
    cols = torch.fft.fftfreq(width, device=device, dtype=torch.float64)[None, :]
    return rows.square() + cols.square()


def _high_frequencies(height: int, width: int, device: torch.device) -> Tensor:
    """(H, W) bool: the FFT bins at or above :data:`HIGH_FREQUENCY` cycles per pixel."""
    return _squared_frequencies(height, width, device).sqrt() >= HIGH_FREQUENCY


def _power(values: Tensor) -> Tensor:
    """(B, H, W) float64: the energy at each FFT bin of images (B, H, W) without their mean."""
    return torch.fft.fft2(values - values.mean(dim=(1, 2), keepdim=True)).abs().square()


def _high_share(power: Tensor, high: Tensor) -> Tensor:
    """(B,): the share of ``power`` (B, n) in the bins ``high`` (n,) bool; 0 without energy."""
    total = power.sum(dim=1)
    return torch.where(total > 0, power[:, high].sum(dim=1) / torch.where(total > 0, total, 1.0), 0.0)


def sharpness_statistic(pixels: Tensor) -> Tensor:
    """(B, 1): the share of the luminance's energy (mean removed) at high spatial frequencies; 0 for a flat image.

    Example:
        >>> checkerboard = (torch.arange(4)[:, None] + torch.arange(4)[None, :]) % 2
        >>> sharpness_statistic(checkerboard.double()[None, None]).tolist()  # all at the Nyquist frequency
        [[1.0]]
    """
    high = _high_frequencies(pixels.shape[2], pixels.shape[3], pixels.device)
    return _high_share(_power(luminance(pixels)).flatten(1), high.flatten())[:, None]


def _gaussian_response(width: Tensor, squared: Tensor) -> Tensor:
    """(B, ...) the transfer function of Gaussian blurs of standard deviation ``width`` (B,) pixels at the squared
    frequencies ``squared`` (...)."""
    return torch.exp(-2 * math.pi**2 * width.reshape(-1, *[1] * squared.dim()).square() * squared)


def _defocus_widths(power: Tensor, high: Tensor, squared: Tensor, share: Tensor) -> Tensor:
    """(B,) the widths (pixels) of the Gaussian blurs that bring the high-frequency share of images with the
    luminance energies ``power`` (B, H, W) down to ``share`` (B,): by bisection, the share falling as the width
    grows, at most :data:`MAX_BLUR`. ``high`` (H, W) bool and ``squared`` (H, W) are the bins' band and squared
    frequency."""
    rings, bins = torch.unique(squared.flatten(), return_inverse=True)  # bins of one frequency blur alike
    ring_power = power.new_zeros(len(power), len(rings)).index_add_(1, bins, power.flatten(1))  # (B, rings)
    ring_high = torch.zeros_like(rings, dtype=torch.bool)
    ring_high[bins[high.flatten()]] = True
    low, wide = torch.zeros_like(share), torch.full_like(share, MAX_BLUR)
    for _ in range(_BISECTIONS):
        middle = (low + wide) / 2
        above = _high_share(ring_power * _gaussian_response(middle, rings).square(), ring_high) > share
        low, wide = torch.where(above, middle, low), torch.where(above, wide, middle)
    return wide


def sharpness_transfer(pixels: Tensor, targets: Tensor, draws: Draws = None) -> Tensor:
    """Pixels (B, C, H, W) whose high-frequency share is ``targets`` (B, 1): below an image's own share, a defocus
    (every channel blurred by the Gaussian, in the Fourier domain, as wide as reaches it, at most :data:`MAX_BLUR`
    px); above it, every channel's high frequencies multiplied by one gain per image (at most :data:`MAX_GAIN`; 1
    for an image without high frequencies)."""
    height, width = pixels.shape[2], pixels.shape[3]
    power = _power(luminance(pixels))
    high = _high_frequencies(height, width, pixels.device)
    share = targets[:, 0].clamp(0.0, 1.0)
    blur = share < _high_share(power.flatten(1), high.flatten())
    energy_high, energy_low = power[:, high].sum(dim=1), power[:, ~high].sum(dim=1)
    wanted = share * energy_low / torch.where(energy_high > 0, energy_high, 1.0) / (1 - share).clamp(min=1e-12)
    gain = torch.where((energy_high > 0) & ~blur, wanted.sqrt().clamp(max=MAX_GAIN), 1.0)
    response = 1 + (gain - 1)[:, None, None] * high  # (B, H, W)
    if bool(blur.any()):
        squared = _squared_frequencies(height, width, pixels.device)
        widths = _defocus_widths(power[blur], high, squared, share[blur])
        response[blur] = _gaussian_response(widths, squared)
    return torch.fft.ifft2(torch.fft.fft2(pixels) * response[:, None]).real


# ----------------------------------------------------------------------------- noise


def _noise_response(values: Tensor) -> Tensor:
    """(B, H - 2, W - 2): images (B, H, W) convolved with the noise kernel (valid part)."""
    return F.conv2d(values[:, None], _NOISE_KERNEL.to(values)[None, None])[:, 0]


def _smoothed(pixels: Tensor) -> Tensor:
    """Pixels (B, C, H, W) smoothed per channel by the 3 x 3 binomial kernel (reflect padding)."""
    channels = pixels.shape[1]
    kernel = _SMOOTHING.to(pixels)[None, None].expand(channels, 1, 3, 3)
    return F.conv2d(F.pad(pixels, (1, 1, 1, 1), mode="reflect"), kernel, groups=channels)


def noise_statistic(pixels: Tensor) -> Tensor:
    """(B, 1): the noise estimate ``rms(Y * N) / 6`` of pixels (B, C, H, W) at least 3 x 3.

    Example:
        >>> ramp = torch.arange(16.0, dtype=torch.float64).reshape(1, 1, 4, 4)  # a plane: no noise
        >>> noise_statistic(ramp).tolist()
        [[0.0]]
    """
    return (_noise_response(luminance(pixels)).square().mean(dim=(1, 2)).sqrt() / 6)[:, None]


def _root(a: Tensor, b: Tensor, c: Tensor, larger: bool) -> Tensor:
    """The larger (or smaller) root of ``a x^2 + 2 b x + c = 0`` (B,); at a negative discriminant, the vertex."""
    discriminant = (b.square() - a * c).clamp(min=0).sqrt()
    safe = torch.where(a > 0, a, 1.0)
    return torch.where(a > 0, (-b + (discriminant if larger else -discriminant)) / safe, 0.0)


def noise_transfer(pixels: Tensor, targets: Tensor, draws: Draws = None) -> Tensor:
    """Pixels (B, C, H, W) whose noise estimate is ``targets`` (B, 1): white noise added, or a blend towards
    the smoothed image (module docstring); the noise is drawn from ``draws`` on the CPU."""
    wanted = 36 * targets[:, 0].clamp(min=0).square()  # mean square of the kernel's response
    response = _noise_response(luminance(pixels))
    noise = draw(tuple(pixels.shape), draws).to(pixels)
    added = _noise_response(luminance(noise))
    # the noise's sign makes its response agree with the image's: the statistic then grows from t = 0 on
    sign = torch.where((response * added).mean(dim=(1, 2)) < 0, -1.0, 1.0).to(pixels)
    noise, added = noise * sign[:, None, None, None], added * sign[:, None, None]
    smoothed = _smoothed(pixels)
    towards = _noise_response(luminance(smoothed)) - response

    def mean(values: Tensor) -> Tensor:
        return values.mean(dim=(1, 2))

    current = mean(response.square())
    # raise: mean((r + t n)^2) = wanted, t >= 0; lower: mean((r + u d)^2) = wanted, u in [0, 1]
    raise_by = _root(mean(added.square()), mean(response * added), current - wanted, larger=True).clamp(min=0)
    lower_by = _root(mean(towards.square()), mean(response * towards), current - wanted, larger=False).clamp(0, 1)
    raised = pixels + raise_by[:, None, None, None] * noise
    lowered = pixels + lower_by[:, None, None, None] * (smoothed - pixels)
    return torch.where((wanted >= current)[:, None, None, None], raised, lowered)


# ----------------------------------------------------------------------------- compression


def compression_statistic(pixels: Tensor) -> Tensor:
    """(B, 1): the blockiness of pixels (B, C, H, W) in [0, 1]: the mean absolute difference of neighbouring luminance
    values across :data:`JPEG_BLOCK` boundaries over the sum of it and that of the other neighbours, rows and
    columns pooled; 0.5 where the two agree, without a boundary (a side of at most 8 px) or without any difference.

    Example:
        >>> steps = (torch.arange(16) // 8).double().expand(16, 16)  # a step at the block boundary only
        >>> ripple = 0.01 * (torch.arange(16) % 2).double()  # and a ripple of 0.01 everywhere
        >>> round(compression_statistic((steps + ripple)[None, None]).item(), 6)  # 0.99 / (0.99 + 0.01)
        0.99
    """
    values = luminance(pixels)
    sums, counts = [values.new_zeros(len(values))] * 2, [0, 0]  # across the boundaries, inside the blocks
    for steps in (values.diff(dim=2).abs(), values.diff(dim=1).abs().transpose(1, 2)):  # (B, H, W - 1), (B, W, H - 1)
        across = steps[:, :, JPEG_BLOCK - 1 :: JPEG_BLOCK]  # between pixels 8 m - 1 and 8 m
        sums = [sums[0] + across.sum(dim=(1, 2)), sums[1] + steps.sum(dim=(1, 2)) - across.sum(dim=(1, 2))]
        counts = [counts[0] + across[0].numel(), counts[1] + steps[0].numel() - across[0].numel()]
    if not counts[0] or not counts[1]:
        return values.new_full((len(values), 1), 0.5)
    across, inside = sums[0] / counts[0], sums[1] / counts[1]
    total = across + inside
    return torch.where(total > 0, across / torch.where(total > 0, total, 1.0), 0.5)[:, None]


def jpeg(pixels: Tensor, quality: int) -> Tensor:
    """Pixels (B, C, H, W) in [0, 1] encoded as JPEG at ``quality`` and decoded (8 bits, on the CPU; 3 channels as
    colour, any other count each channel as greyscale), float64 on ``pixels``' device."""
    levels = (pixels.detach().clamp(0, 1) * 255).round().to(torch.uint8).cpu()
    images = levels if pixels.shape[1] == 3 else levels.flatten(0, 1)[:, None]  # greyscale: (B C, 1, H, W)
    return (TF.jpeg(images, quality).reshape(pixels.shape).double() / 255).to(pixels.device)


def compression_transfer(pixels: Tensor, targets: Tensor, draws: Draws = None) -> Tensor:
    """Pixels (B, C, H, W) whose blockiness reaches ``targets`` (B, 1): each image below its target by more than
    :data:`JPEG_TOLERANCE` encoded as a JPEG at the highest quality of :data:`JPEG_QUALITIES` that reaches it (when
    none does, the blockiest of them: at the lowest qualities a block can turn flat); the others kept."""
    result, reached = pixels.clone(), compression_statistic(pixels)[:, 0]
    pending = (reached < targets[:, 0] - JPEG_TOLERANCE).nonzero()[:, 0]
    for quality in JPEG_QUALITIES:
        if not len(pending):
            break
        encoded = jpeg(pixels[pending], quality)
        statistic = compression_statistic(encoded)[:, 0]
        better = statistic > reached[pending]
        result[pending[better]], reached[pending[better]] = encoded[better], statistic[better]
        pending = pending[statistic < targets[pending, 0]]
    return result


# ----------------------------------------------------------------------------- tone


def tone_statistic(pixels: Tensor) -> Tensor:
    """(B, 1): the background's optical density of pixels (B, C, H, W): ``-mean_c log10 q_c``, ``q_c`` the
    :data:`BACKGROUND_QUANTILE` quantile of channel c (the lower of the two neighbouring values), clamped to
    [:data:`TONE_FLOOR`, 1]; 0 for a white background.

    Example:
        >>> image = torch.full((1, 3, 10, 10), 0.001, dtype=torch.float64)  # dark cells on the left half
        >>> image[:, :, :, 5:] = torch.tensor([1.0, 0.1, 0.01], dtype=torch.float64)[:, None, None]  # background
        >>> round(tone_statistic(image).item(), 6)  # the background's densities 0, 1 and 2: their mean
        1.0
        >>> round(tone_statistic(tone_transfer(image, torch.tensor([[0.7]], dtype=torch.float64))).item(), 6)
        0.7
    """
    levels = pixels.clamp(TONE_FLOOR, 1.0).flatten(2).quantile(BACKGROUND_QUANTILE, dim=2, interpolation="lower")
    return -levels.log10().mean(dim=1, keepdim=True)


def tone_transfer(pixels: Tensor, targets: Tensor, draws: Draws = None) -> Tensor:
    """Pixels (B, C, H, W) whose background density is ``targets`` (B, 1): every channel raised to one power per
    image ``target / current`` (within [1 / :data:`MAX_GAMMA`, :data:`MAX_GAMMA`]; an image with a white background
    is left as it is; negative pixels become 0)."""
    current = tone_statistic(pixels)[:, 0]
    power = torch.where(current > 0, targets[:, 0] / torch.where(current > 0, current, 1.0), 1.0)
    return pixels.clamp(min=0.0) ** power.clamp(1 / MAX_GAMMA, MAX_GAMMA)[:, None, None, None]


# ----------------------------------------------------------------------------- registration


def _edge_strength(values: Tensor) -> Tensor:
    """(B, H, W): the gradient magnitude of images (B, H, W) (central differences, edges repeated)."""
    padded = F.pad(values[:, None], (1, 1, 1, 1), mode="replicate")[:, 0]
    across = (padded[:, 1:-1, 2:] - padded[:, 1:-1, :-2]) / 2
    down = (padded[:, 2:, 1:-1] - padded[:, :-2, 1:-1]) / 2
    return (across.square() + down.square()).sqrt()


def _centred(strengths: list[Tensor]) -> tuple[list[Tensor], Tensor]:
    """Edge strengths (B, H, W) of two sets of images, each less its image's mean, and (B,) bool: where either image
    has no edge (a cross-correlation of a flat image has no peak)."""
    centred = [values - values.mean(dim=(1, 2), keepdim=True) for values in strengths]
    flat = (centred[0].abs().amax(dim=(1, 2)) == 0) | (centred[1].abs().amax(dim=(1, 2)) == 0)
    return centred, flat


def _vertex(before: Tensor, peak: Tensor, after: Tensor) -> Tensor:
    """(B,) the offset in [-0.5, 0.5] of the vertex of the parabola through three neighbouring values (B,) each from
    the middle one; 0 where they do not curve down."""
    curvature = before - 2 * peak + after
    safe = torch.where(curvature < 0, curvature, -1.0)
    return torch.where(curvature < 0, (before - after) / (2 * safe), 0.0).clamp(-0.5, 0.5)


def channel_displacement(moving: Tensor, reference: Tensor) -> Tensor:
    """(B, 2): the displacement (x to the right, y down; pixels) of images ``moving`` (B, H, W) from ``reference``
    (B, H, W): the peak of the circular cross-correlation of their edge strengths (mean removed), searched
    within :data:`MAX_SHIFT` px and refined to a fraction of a pixel by a parabola on each axis; 0 where either has
    no edge. Edge strengths, not values: a channel may be dark where another is bright (a colour edge).

    Example:
        >>> square = torch.zeros(1, 16, 16, dtype=torch.float64)
        >>> square[:, 5:10, 5:10] = 1.0
        >>> channel_displacement(square.roll(1, dims=2), square).tolist()  # one pixel to the right
        [[1.0, 0.0]]
    """
    height, width = moving.shape[1:]
    edges, flat = _centred([_edge_strength(values) for values in (moving, reference)])
    correlation = torch.fft.ifft2(torch.fft.fft2(edges[0]) * torch.fft.fft2(edges[1]).conj()).real  # [b, dy, dx]
    shifts = torch.arange(-MAX_SHIFT, MAX_SHIFT + 1, device=moving.device)
    near = correlation[:, shifts % height][:, :, shifts % width].flatten(1)  # (B, (2M + 1)^2)
    best = near.argmax(dim=1)
    row, col = shifts[best // len(shifts)], shifts[best % len(shifts)]
    image = torch.arange(len(moving), device=moving.device)

    def at(down: int, across: int) -> Tensor:
        return correlation[image, (row + down) % height, (col + across) % width]

    peak = at(0, 0)
    offset = torch.stack([col + _vertex(at(0, -1), peak, at(0, 1)), row + _vertex(at(-1, 0), peak, at(1, 0))], dim=1)
    return torch.where(flat[:, None], 0.0, offset.to(moving.dtype))


def _shift_along_lines(moving: Tensor, reference: Tensor) -> Tensor:
    """(B,): how far images ``moving`` (B, L, W) are displaced to the right of ``reference`` (B, L, W), in pixels: the
    peak of the circular cross-correlation of their horizontal edge strengths (mean removed), summed over the L
    lines, searched within :data:`MAX_SHIFT` px and refined by a parabola; 0 where either has no edge."""
    padded = [F.pad(values, (1, 1), mode="replicate") for values in (moving, reference)]
    edges, flat = _centred([(values[..., 2:] - values[..., :-2]).abs() for values in padded])
    correlation = torch.fft.ifft(torch.fft.fft(edges[0]) * torch.fft.fft(edges[1]).conj()).real.sum(dim=1)  # (B, lag)
    width = moving.shape[2]
    shifts = torch.arange(-MAX_SHIFT, MAX_SHIFT + 1, device=moving.device)
    best = shifts[correlation[:, shifts % width].argmax(dim=1)]
    image = torch.arange(len(moving), device=moving.device)
    peak = correlation[image, best % width]
    offset = best + _vertex(correlation[image, (best - 1) % width], peak, correlation[image, (best + 1) % width])
    return torch.where(flat, 0.0, offset.to(moving.dtype))


def channel_magnification(moving: Tensor, reference: Tensor) -> Tensor:
    """(B,): how much larger images ``moving`` (B, H, W) show their content than ``reference`` (B, H, W), as a
    fraction (0.06: 6 % larger about the centre): the horizontal displacement of the right half less the left half's
    (:func:`_shift_along_lines`) over the distance between their centres, averaged with the same, vertically, of the
    bottom and the top halves. A displacement of the whole cancels; a magnification moves the halves apart.

    Example:
        >>> cell = torch.full((1, 16, 16), 0.8, dtype=torch.float64)
        >>> cell[:, 3:13, 4:12] = 0.3
        >>> round(channel_magnification(_magnified(cell, torch.tensor([1.1], dtype=torch.float64)), cell).item(), 1)
        0.1
    """
    height, width = moving.shape[1:]
    right, left = (_shift_along_lines(moving[..., cut], reference[..., cut]) for cut in _halves(width))
    bottom, top = (_shift_along_lines(moving[:, cut].mT, reference[:, cut].mT) for cut in _halves(height))
    return ((right - left) / (width - width // 2) + (bottom - top) / (height - height // 2)) / 2


def _halves(length: int) -> tuple[slice, slice]:
    """The second and the first half of ``length`` pixels (the middle one left out of an odd length)."""
    return slice(length - length // 2, None), slice(None, length // 2)


def _coordinates(height: int, width: int, like: Tensor) -> tuple[Tensor, Tensor]:
    """x (left -1 to right 1) and y (top -1 to bottom 1) of every pixel, (H, W) each."""
    y = torch.linspace(-1.0, 1.0, height, dtype=like.dtype, device=like.device)[:, None].expand(height, width)
    x = torch.linspace(-1.0, 1.0, width, dtype=like.dtype, device=like.device)[None, :].expand(height, width)
    return x, y


def _magnified(values: Tensor, factor: Tensor) -> Tensor:
    """Images (B, H, W) magnified by ``factor`` (B,) about their centres (bilinear, edges repeated)."""
    grid = torch.stack(_coordinates(values.shape[1], values.shape[2], values), dim=-1)  # (H, W, 2): x, y of each pixel
    sampled = grid[None] / factor[:, None, None, None]  # where each output pixel takes its value from
    return F.grid_sample(values[:, None], sampled, mode="bilinear", padding_mode="border", align_corners=True)[:, 0]


def _outer_channels(pixels: Tensor) -> tuple[Tensor, Tensor]:
    """RGB pixels' first and last channels stacked (2B, H, W), and the middle one twice (2B, H, W)."""
    return torch.cat([pixels[:, 0], pixels[:, 2]]), pixels[:, 1].repeat(2, 1, 1)


def _pairs(values: Tensor) -> Tensor:
    """(B, 2S) from (2B, S): the first and the last channel's values side by side."""
    first, last = values.split(len(values) // 2)
    return torch.cat([first, last], dim=1)


def registration_statistic(pixels: Tensor) -> Tensor:
    """(B, 6): the displacements (x, y; pixels) of the first channel and of the last from the middle one, of RGB
    pixels (B, 3, H, W) (:func:`channel_displacement`), and how much larger each shows the content
    (:func:`channel_magnification`); about 0 where the channels are in register.

    Example:
        >>> grey = torch.full((1, 3, 16, 16), 0.8, dtype=torch.float64)
        >>> grey[:, :, 4:11, 5:10] = 0.3  # a dark cell, in register
        >>> targets = torch.tensor([[1.0, 0.0, -1.0, 0.0, 0.0, 0.0]], dtype=torch.float64)
        >>> aberrated = registration_transfer(grey, targets)
        >>> [round(value, 1) + 0.0 for value in registration_statistic(aberrated)[0].tolist()]  # red right, blue left
        [1.0, 0.0, -1.0, 0.0, 0.0, 0.0]
    """
    _check_rgb(pixels, "registration")
    outer, middle = _outer_channels(pixels)
    return torch.cat(
        [_pairs(channel_displacement(outer, middle)), _pairs(channel_magnification(outer, middle)[:, None])], 1
    )


def _shifted_lines(values: Tensor, shift: Tensor) -> Tensor:
    """Lines (B, L, W) moved ``shift`` (B,) px to the right (any fraction): a phase ramp in the Fourier domain of each
    line with :data:`SHIFT_BORDER` px of its ends repeated, cropped back."""
    border = SHIFT_BORDER
    padded = F.pad(values, (border, border), mode="replicate")
    frequencies = torch.fft.rfftfreq(padded.shape[-1], dtype=values.dtype, device=values.device)
    ramp = torch.exp(-2j * math.pi * frequencies * shift[:, None, None])
    return torch.fft.irfft(torch.fft.rfft(padded) * ramp, n=padded.shape[-1])[..., border:-border]


def _moved(values: Tensor, shift: Tensor) -> Tensor:
    """Images (B, H, W) moved by ``shift`` (B, 2) (x, y; pixels, any fraction): their rows, then their columns
    (:func:`_shifted_lines`)."""
    return _shifted_lines(_shifted_lines(values, shift[:, 0]).mT, shift[:, 1]).mT


def registration_transfer(pixels: Tensor, targets: Tensor, draws: Draws = None) -> Tensor:
    """RGB pixels (B, 3, H, W) whose first and last channels are displaced from the middle one and magnified against
    it by ``targets`` (B, 6): each magnified by the ratio of its target to its measured magnification (at most
    :data:`MAX_MAGNIFICATION` either way; :func:`_magnified`), then moved by its target less its measured
    displacement (:func:`_moved`, at most :data:`MAX_SHIFT` px each way); the middle channel stays."""
    _check_rgb(pixels, "registration")
    outer, middle = _outer_channels(pixels)
    wanted = torch.cat([targets[:, 4], targets[:, 5]])
    factor = ((1 + wanted) / (1 + channel_magnification(outer, middle))).clamp(1 / MAX_MAGNIFICATION, MAX_MAGNIFICATION)
    outer = _magnified(outer, factor)
    wanted = torch.cat([targets[:, :2], targets[:, 2:4]])
    outer = _moved(outer, (wanted - channel_displacement(outer, middle)).clamp(-MAX_SHIFT, MAX_SHIFT))  # (2B, H, W)
    first, last = outer.split(len(pixels))
    return torch.stack([first, pixels[:, 1], last], dim=1)


# ----------------------------------------------------------------------------- stripes


def _parity_means(lines: Tensor) -> tuple[Tensor, Tensor]:
    """The means (...,) of the even and of the odd entries of line means (..., L)."""
    return lines[..., 0::2].mean(dim=-1), lines[..., 1::2].mean(dim=-1)


def _alternation(lines: Tensor) -> Tensor:
    """(...,): ``2 (m_even - m_odd) / (m_even + m_odd)`` of line means (..., L); 0 where both means are 0."""
    even, odd = _parity_means(lines)
    total = even + odd
    return torch.where(total > 0, 2 * (even - odd) / torch.where(total > 0, total, 1.0), 0.0)


def _alternation_gain(lines: Tensor, target: Tensor) -> Tensor:
    """(B,) the ``a`` whose gains ``1 + a`` on even lines and ``1 - a`` on odd ones give line means (B, L) the
    alternation ``target`` (B,): ``a = (t S - 2 D) / (2 S - t D)`` with S and D the sum and difference of the two
    parities' means (exact; within [-0.9, 0.9])."""
    even, odd = _parity_means(lines)
    total, difference = even + odd, even - odd
    denominator = 2 * total - target * difference
    safe = torch.where(denominator != 0, denominator, 1.0)
    return torch.where(denominator != 0, (target * total - 2 * difference) / safe, 0.0).clamp(-0.9, 0.9)


def _parity_signs(length: int, like: Tensor) -> Tensor:
    """(L,): +1 on even lines, -1 on odd ones."""
    return 1 - 2 * (torch.arange(length, device=like.device) % 2).to(like.dtype)


def _pattern_band(length: int, like: Tensor) -> Tensor:
    """(L,) bool: the frequencies of a line profile of ``length`` from :data:`STRIPE_FREQUENCY` cycles per pixel up to,
    not including, the alternation's 0.5."""
    frequencies = torch.fft.fftfreq(length, device=like.device, dtype=torch.float64).abs()
    return (frequencies >= STRIPE_FREQUENCY) & (frequencies < 0.5)


def _pattern_energies(values: Tensor) -> tuple[Tensor, Tensor]:
    """The energies of images (B, H, W) in a finer pattern of rows and of columns, (B, 2), and in all (B,), as the 2-D
    Fourier transform has them: a pattern of rows is the row means' profile (the bins without horizontal frequency),
    ``|F[k, 0]|^2 = W^2 |fft(row means)[k]|^2``, and all of it ``H W sum (Y - mean)^2`` (Parseval)."""
    height, width = values.shape[1:]
    patterns = []
    for lines, across in ((values.mean(dim=2), width), (values.mean(dim=1), height)):
        band = _pattern_band(lines.shape[1], lines)
        patterns.append(across**2 * torch.fft.fft(lines).abs().square()[:, band].sum(dim=1))
    total = height * width * (values - values.mean(dim=(1, 2), keepdim=True)).square().sum(dim=(1, 2))
    return torch.stack(patterns, dim=1), total


def stripes_statistic(pixels: Tensor) -> Tensor:
    """(B, 4) of pixels (B, C, H, W), from their luminance: how much brighter the even rows are than the odd ones
    (``2 (m_even - m_odd) / (m_even + m_odd)``, signed), the same for columns, and the shares of the energy (mean
    removed) in a finer pattern of rows and of columns (one value per line, at :data:`STRIPE_FREQUENCY` cycles per
    pixel or more, below 0.5); 0 for a flat image.

    Example:
        >>> banded = 0.5 + 0.1 * (torch.arange(8) % 2 == 0).double()[:, None].expand(8, 8)  # even rows brighter
        >>> [round(value, 3) for value in stripes_statistic(banded[None, None])[0].tolist()]  # 2 x 0.1 / 1.1
        [0.182, 0.0, 0.0, 0.0]
    """
    values = luminance(pixels)
    patterns, total = _pattern_energies(values)
    shares = torch.where(total[:, None] > 0, patterns / torch.where(total > 0, total, 1.0)[:, None], 0.0)
    return torch.cat([_alternation(values.mean(dim=2))[:, None], _alternation(values.mean(dim=1))[:, None], shares], 1)


def stripes_transfer(pixels: Tensor, targets: Tensor, draws: Draws = None) -> Tensor:
    """Pixels (B, C, H, W) whose stripes statistics are ``targets`` (B, 4): the rows' and the columns' alternation by
    a gain on even lines against odd ones (:func:`_alternation_gain`; a line sensor's uneven gains; rows and columns
    in turn, :data:`_ALTERNATION_ROUNDS` times), then each finer pattern multiplied by one gain per image (exact:
    with energies E_k in the two patterns and E_o elsewhere, ``g_k^2 E_k = t_k E_o / (1 - t_1 - t_2)``; at most
    :data:`MAX_STRIPE_GAIN`; 1 for an image without the pattern): every channel's line means' profile in the band,
    times ``g - 1``, added to its lines. The finer patterns keep each frequency's phase: the image's own."""
    values = luminance(pixels)
    height, width = values.shape[1:]
    rows, cols = torch.ones_like(values[:, :, 0]), torch.ones_like(values[:, 0])  # (B, H), (B, W) line gains
    for _ in range(_ALTERNATION_ROUNDS):  # each line's gain moves the other direction's alternation a little
        row_gain = 1 + _alternation_gain(values.mean(dim=2), targets[:, 0])[:, None] * _parity_signs(height, values)
        values, rows = values * row_gain[:, :, None], rows * row_gain
        col_gain = 1 + _alternation_gain(values.mean(dim=1), targets[:, 1])[:, None] * _parity_signs(width, values)
        values, cols = values * col_gain[:, None, :], cols * col_gain
    pixels = pixels * rows[:, None, :, None] * cols[:, None, None, :]
    patterns, total = _pattern_energies(values)
    elsewhere = total - patterns.sum(dim=1)
    shares = targets[:, 2:].clamp(0.0, 1.0)
    wanted = shares * (elsewhere / (1 - shares.sum(dim=1)).clamp(min=1e-12))[:, None]
    gains = torch.where(patterns > 0, (wanted / torch.where(patterns > 0, patterns, 1.0)).sqrt(), 1.0)
    extra = gains.clamp(max=MAX_STRIPE_GAIN) - 1  # (B, 2)
    for k, (dim, length) in enumerate(((3, height), (2, width))):
        profile = torch.fft.fft(pixels.mean(dim=dim)) * _pattern_band(length, pixels)  # (B, C, L) in the band
        pattern = extra[:, k, None, None] * torch.fft.ifft(profile).real
        pixels = pixels + pattern.unsqueeze(dim)
    return pixels


# ----------------------------------------------------------------------------- interlacing


def _row_displacement(values: Tensor) -> Tensor:
    """(B,): how far images' (B, H, W) odd rows are displaced to the right of their even rows (pixels,
    :func:`_shift_along_lines`); 0 for an image of fewer than 2 rows.

    Example:
        >>> square = torch.zeros(1, 16, 16, dtype=torch.float64)
        >>> square[:, 4:12, 5:10] = 1.0
        >>> square[:, 1::2] = square[:, 1::2].roll(2, dims=2)  # interlaced: the odd rows 2 px right
        >>> _row_displacement(square).tolist()
        [2.0]
    """
    lines = values.shape[1] // 2
    if not lines:
        return values.new_zeros(len(values))
    return _shift_along_lines(values[:, 1 : 2 * lines : 2], values[:, 0 : 2 * lines : 2])


def _fields_moved(pixels: Tensor, shift: Tensor) -> Tensor:
    """Pixels (B, C, H, W) whose odd rows are moved ``shift`` (B,) px to the right (:func:`_shifted_lines`)."""
    odd = pixels[:, :, 1::2]
    moved = pixels.clone()
    moved[:, :, 1::2] = _shifted_lines(odd.flatten(0, 1), shift.repeat_interleave(pixels.shape[1])).view_as(odd)
    return moved


def interlacing_statistic(pixels: Tensor) -> Tensor:
    """(B, 2) of pixels (B, C, H, W), from their luminance: how far the odd rows are displaced to the right of the
    even ones and the odd columns down from the even ones (pixels; :func:`_row_displacement`): about 0 for images
    taken in one pass, the fields' offset for interlaced ones (or a bidirectional scan out of step).

    Example:
        >>> cell = torch.full((1, 1, 16, 16), 0.8, dtype=torch.float64)
        >>> cell[..., 4:12, 5:10] = 0.3
        >>> moved = interlacing_transfer(cell, torch.tensor([[1.5, 0.0]], dtype=torch.float64))  # odd rows 1.5 px right
        >>> [round(value, 1) + 0.0 for value in interlacing_statistic(moved)[0].tolist()]
        [1.5, 0.0]
    """
    values = luminance(pixels)
    return torch.stack([_row_displacement(values), _row_displacement(values.mT)], dim=1)


def interlacing_transfer(pixels: Tensor, targets: Tensor, draws: Draws = None) -> Tensor:
    """Pixels (B, C, H, W) whose odd rows and odd columns are displaced by ``targets`` (B, 2) from the even ones: each
    moved by its target less its measured displacement (:func:`_fields_moved`, at most :data:`MAX_SHIFT` px each way;
    the rows first). Interlacing runs one way: given both at once, moving the columns moves the rows' estimate too
    (by up to 0.9 px of 2.5 on smooth textures)."""
    row_shift = (targets[:, 0] - _row_displacement(luminance(pixels))).clamp(-MAX_SHIFT, MAX_SHIFT)
    pixels = _fields_moved(pixels, row_shift)
    column_shift = (targets[:, 1] - _row_displacement(luminance(pixels).mT)).clamp(-MAX_SHIFT, MAX_SHIFT)
    return _fields_moved(pixels.mT, column_shift).mT


# ----------------------------------------------------------------------------- fixed pattern


def _line_profiles(values: Tensor) -> tuple[Tensor, Tensor]:
    """The fine profiles of images (B, H, W): each row's mean over the image's mean, less 1, without the frequencies
    under :data:`LINE_FREQUENCY`, (B, H), and the same of the columns, (B, W); 0 for a black image."""
    mean = values.mean(dim=(1, 2))[:, None]
    safe = torch.where(mean > 0, mean, 1.0)
    profiles = []
    for lines in (values.mean(dim=2), values.mean(dim=1)):
        relative = torch.where(mean > 0, lines / safe - 1, 0.0)
        fine = torch.fft.rfftfreq(lines.shape[1], device=lines.device, dtype=torch.float64) >= LINE_FREQUENCY
        profiles.append(torch.fft.irfft(torch.fft.rfft(relative) * fine, n=lines.shape[1]))
    return profiles[0], profiles[1]


def fixed_pattern_statistic(pixels: Tensor) -> Tensor:
    """(B, H + W) of pixels (B, C, H, W), from their luminance: the fine profile of the rows' brightness (each row's
    mean over the image's, less 1, its frequencies under :data:`LINE_FREQUENCY` left out), then the columns'.

    Example:
        >>> flat = torch.full((1, 1, 8, 8), 0.5, dtype=torch.float64)
        >>> flat[..., 3] = 0.6  # column 3 brighter (a column amplifier's gain)
        >>> [round(value, 3) for value in fixed_pattern_statistic(flat)[0, 8:].tolist()]  # 0.6 / 0.5125 - 1 at 3
        [-0.024, -0.024, -0.024, 0.171, -0.024, -0.024, -0.024, -0.024]
    """
    return torch.cat(_line_profiles(luminance(pixels)), dim=1)


def fixed_pattern_transfer(pixels: Tensor, targets: Tensor, draws: Draws = None) -> Tensor:
    """Pixels (B, C, H, W) whose fine line profiles are ``targets`` (B, H + W) (:func:`fixed_pattern_statistic`):
    every channel's rows, then its columns, multiplied by ``(1 + target) / (1 + own)`` (within [1 /
    :data:`MAX_LINE_GAIN`, :data:`MAX_LINE_GAIN`]), :data:`_LINE_ROUNDS` times."""
    height, width = pixels.shape[2:]
    if targets.shape[1] != height + width:
        raise ValueError(
            f"fixed_pattern's targets are one number per row and per column, (B, {height + width}) for {height} x "
            f"{width} images; got {tuple(targets.shape)}: statistics of images of another size"
        )
    wanted = targets.split([height, width], dim=1)
    for _ in range(_LINE_ROUNDS):
        for axis, shape in enumerate(((-1, 1, height, 1), (-1, 1, 1, width))):
            own = _line_profiles(luminance(pixels))[axis]
            gains = (1 + wanted[axis]) / (1 + own).clamp(min=1 / MAX_LINE_GAIN)
            pixels = pixels * gains.clamp(1 / MAX_LINE_GAIN, MAX_LINE_GAIN).reshape(shape)
    return pixels


# ----------------------------------------------------------------------------- illumination


def illumination_statistic(pixels: Tensor) -> Tensor:
    """(B, 2) of pixels (B, C, H, W): the least-squares slopes of Y over its mean, less 1, against x and y (from -1
    at the left and top edge to 1 at the right and bottom): how much more light one side of the field has; 0 for a
    black image.

    Example:
        >>> x, _ = _coordinates(8, 8, torch.zeros((), dtype=torch.float64))
        >>> lit = (0.5 * (1 + 0.2 * x)).expand(1, 1, 8, 8)  # 20 % more light at the right edge, 20 % less at the left
        >>> [round(value, 3) + 0.0 for value in illumination_statistic(lit)[0].tolist()]  # + 0.0: no "-0.0"
        [0.2, 0.0]
    """
    values = luminance(pixels)
    mean = values.mean(dim=(1, 2), keepdim=True)
    relative = torch.where(mean > 0, values / torch.where(mean > 0, mean, 1.0) - 1, 0.0)
    axes = torch.stack(_coordinates(values.shape[1], values.shape[2], values)).flatten(1)  # (2, H W), orthogonal
    return relative.flatten(1) @ (axes / axes.square().sum(dim=1, keepdim=True)).T


def illumination_transfer(pixels: Tensor, targets: Tensor, draws: Draws = None) -> Tensor:
    """Pixels (B, C, H, W) whose slopes are ``targets`` (B, 2) (:func:`illumination_statistic`): every channel
    multiplied by ``1 + dx x + dy y`` (``d`` the slopes still missing; within [1 / :data:`MAX_ILLUMINATION_GAIN`,
    :data:`MAX_ILLUMINATION_GAIN`]), :data:`_ILLUMINATION_ROUNDS` times."""
    x, y = _coordinates(pixels.shape[2], pixels.shape[3], pixels)
    for _ in range(_ILLUMINATION_ROUNDS):
        missing = (targets - illumination_statistic(pixels))[:, :, None, None]
        gains = 1 + missing[:, 0] * x + missing[:, 1] * y
        pixels = pixels * gains.clamp(1 / MAX_ILLUMINATION_GAIN, MAX_ILLUMINATION_GAIN)[:, None]
    return pixels


# ----------------------------------------------------------------------------- mosaic


def _mosaic_means(pixels: Tensor) -> Tensor:
    """(B, C, 2, 2): each channel's mean over each of the four pixels of the image's 2 x 2 blocks (row parity,
    column parity; a last odd row or column left out)."""
    batch, channels, height, width = pixels.shape
    whole = pixels[..., : height // 2 * 2, : width // 2 * 2]
    return whole.reshape(batch, channels, height // 2, 2, width // 2, 2).mean(dim=(2, 4))


def mosaic_statistic(pixels: Tensor) -> Tensor:
    """(B, 12) of RGB pixels (B, 3, H, W): each channel's mean over each pixel of the 2 x 2 blocks (even row and
    column, even row and odd column, odd row and even column, odd row and column) over the channel's mean, less 1;
    0 for a black channel.

    Example:
        >>> greens = torch.ones(1, 3, 4, 4, dtype=torch.float64)
        >>> greens[:, 1, 1::2, 0::2] = 1.2  # the green pixels of the odd rows 20 % brighter
        >>> [round(value, 3) for value in mosaic_statistic(greens)[0, 4:8].tolist()]
        [-0.048, -0.048, 0.143, -0.048]
    """
    _check_rgb(pixels, "mosaic")
    means = _mosaic_means(pixels)
    channel = means.mean(dim=(2, 3), keepdim=True)
    return torch.where(channel > 0, means / torch.where(channel > 0, channel, 1.0) - 1, 0.0).flatten(1)


def mosaic_transfer(pixels: Tensor, targets: Tensor, draws: Draws = None) -> Tensor:
    """RGB pixels (B, 3, H, W) whose :func:`mosaic_statistic` is ``targets`` (B, 12): each pixel of each channel's
    2 x 2 blocks multiplied by ``(1 + target) / (1 + own)`` (within [1 / :data:`MAX_MOSAIC_GAIN`,
    :data:`MAX_MOSAIC_GAIN`]; exact within them, as the channel's mean is the mean of its four means)."""
    _check_rgb(pixels, "mosaic")
    own = mosaic_statistic(pixels)
    gains = ((1 + targets) / (1 + own).clamp(min=1 / MAX_MOSAIC_GAIN)).clamp(1 / MAX_MOSAIC_GAIN, MAX_MOSAIC_GAIN)
    height, width = pixels.shape[2], pixels.shape[3]
    tiled = gains.reshape(-1, 3, 2, 2).repeat(1, 1, (height + 1) // 2, (width + 1) // 2)
    return pixels * tiled[..., :height, :width]


# ----------------------------------------------------------------------------- signature

#: The properties the signature gives, in the order of its transfer: the channels' registration and the fields'
#: first (a shift moves no other statistic much, and what it moves the later transfers set), noise before sharpness
#: (noise added or smoothed away moves the high-frequency share; the sharpness transfer then moves the noise level
#: little), the stripes after the sharpness (whose gain on every high frequency would scale them again), the mosaic
#: after the stripes (their gain on every other line moves its 2 x 2 blocks' means), colour and brightness last (exact,
#: and they barely move the others).
SIGNATURE_PARTS: tuple[PropertyName, ...] = (
    "registration",
    "interlacing",
    "noise",
    "sharpness",
    "stripes",
    "mosaic",
    "colour",
    "brightness",
)
#: Its statistics' order.
_SIGNATURE_ORDER: tuple[PropertyName, ...] = (
    "colour",
    "brightness",
    "sharpness",
    "noise",
    "registration",
    "stripes",
    "interlacing",
    "mosaic",
)


def signature_statistic(pixels: Tensor) -> Tensor:
    """(B, 29): the colour, brightness, sharpness, noise, registration, stripes, interlacing and mosaic statistics of
    RGB pixels (B, 3, H, W), side by side.

    Example:
        >>> generator = torch.Generator().manual_seed(0)
        >>> images = 0.3 + 0.4 * torch.rand(2, 3, 16, 16, dtype=torch.float64, generator=generator)
        >>> images[1] += torch.tensor([0.1, 0.0, -0.1], dtype=torch.float64)[:, None, None]  # image 1 has a cast
        >>> given = signature_transfer(images[:1], signature_statistic(images[1:]), torch.Generator().manual_seed(0))
        >>> reached, wanted = signature_statistic(given), signature_statistic(images[1:])  # image 0 given 1's
        >>> torch.allclose(reached[:, :4], wanted[:, :4], atol=0.005)  # the noise estimate: lowered by the defocus
        True
    """
    _check_rgb(pixels, "signature")
    return torch.cat([PROPERTIES[name].statistic(pixels) for name in _SIGNATURE_ORDER], dim=1)


def signature_parts(signature: Tensor) -> dict[PropertyName, Tensor]:
    """The columns of ``signature`` (B, 29) (:func:`signature_statistic`) by property: (B, S) each."""
    sizes = [len(PROPERTIES[name].statistics) for name in _SIGNATURE_ORDER]
    return dict(zip(_SIGNATURE_ORDER, signature.split(sizes, dim=1), strict=True))


def signature_transfer(pixels: Tensor, targets: Tensor, draws: Draws = None) -> Tensor:
    """RGB pixels (B, 3, H, W) given the signature ``targets`` (B, 29): each part's transfer in the order of
    :data:`SIGNATURE_PARTS`."""
    _check_rgb(pixels, "signature")
    parts = signature_parts(targets)
    for name in SIGNATURE_PARTS:
        pixels = PROPERTIES[name].transfer(pixels, parts[name], draws)
    return pixels


#: Every property, by name.
PROPERTIES: dict[PropertyName, GlobalProperty] = {
    "colour": GlobalProperty("colour", "colour statistics", ("alpha", "beta"), 3, colour_statistic, colour_transfer),
    "hue": GlobalProperty(
        "hue", "hue (of the most chromatic pixels)", ("angle",), 3, hue_statistic, hue_transfer, angle=True
    ),
    "brightness": GlobalProperty("brightness", "brightness", ("luminance",), None, brightness_statistic,
                                 brightness_transfer),
    "sharpness": GlobalProperty(
        "sharpness", "sharpness (high-frequency energy)", ("high_share",), None, sharpness_statistic,
        sharpness_transfer,
    ),
    "noise": GlobalProperty("noise", "noise level", ("sigma",), None, noise_statistic, noise_transfer),
    "compression": GlobalProperty("compression", "compression (JPEG blockiness)", ("blockiness",), None,
                                  compression_statistic, compression_transfer),
    "tone": GlobalProperty("tone", "background tone (the brightest pixels' density, given by a gamma)",
                           ("background_density",), 3, tone_statistic, tone_transfer),
    "registration": GlobalProperty(
        "registration",
        "channel registration (the red and blue channels' displacement and magnification against the green)",
        ("red_dx", "red_dy", "blue_dx", "blue_dy", "red_scale", "blue_scale"), 3, registration_statistic,
        registration_transfer,
    ),
    "stripes": GlobalProperty(
        "stripes", "stripes (a fine pattern of rows or of columns)",
        ("row_alternation", "column_alternation", "row_pattern", "column_pattern"), None, stripes_statistic,
        stripes_transfer,
    ),
    "interlacing": GlobalProperty(
        "interlacing", "interlacing (the odd rows' and columns' displacement from the even ones)",
        ("row_shift", "column_shift"), None, interlacing_statistic, interlacing_transfer,
    ),
    "fixed_pattern": GlobalProperty(
        "fixed_pattern", "fixed-pattern noise (each row's and column's own brightness)", (), None,
        fixed_pattern_statistic, fixed_pattern_transfer, lines=True,
    ),
    "illumination": GlobalProperty(
        "illumination", "uneven illumination (how much brighter the right side is than the left, the bottom than the "
        "top)", ("x_slope", "y_slope"), None, illumination_statistic, illumination_transfer,
    ),
    "mosaic": GlobalProperty(
        "mosaic", "colour filter mosaic (each colour channel's brightness on each pixel of the 2 x 2 blocks)",
        tuple(f"{channel}_{row}{column}" for channel in RGB_CHANNELS for row in (0, 1) for column in (0, 1)), 3,
        mosaic_statistic, mosaic_transfer,
    ),
}  # fmt: skip
PROPERTIES["signature"] = GlobalProperty(
    "signature",
    "image-wide signature (colour, brightness, sharpness, noise, registration, stripes, interlacing and mosaic at "
    "once)",
    tuple(statistic for name in _SIGNATURE_ORDER for statistic in PROPERTIES[name].statistics),
    3, signature_statistic, signature_transfer,
)  # fmt: skip
