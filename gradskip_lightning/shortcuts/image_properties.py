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
- ``signature`` (3 channels): the image-wide signature, every statistic above but the blockiness and the tone
  at once (α, β, Y's median, the high-frequency share, the noise estimate); the transfer applies noise,
  sharpness, colour and brightness in turn (brightness last: it is exact, the others to within what the later
  transfers move them).
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

PropertyName = Literal["colour", "brightness", "sharpness", "noise", "compression", "tone", "signature"]
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

_RGB_TO_LMS = torch.tensor(
    [[0.3811, 0.5783, 0.0402], [0.1967, 0.7244, 0.0782], [0.0241, 0.1288, 0.8444]], dtype=torch.float64
)
_LOG_LMS_TO_LAB = torch.diag(torch.tensor([3.0, 6.0, 2.0], dtype=torch.float64).rsqrt()) @ torch.tensor(
    [[1.0, 1.0, 1.0], [1.0, 1.0, -2.0], [1.0, -1.0, 0.0]], dtype=torch.float64
)
_REC601 = (0.299, 0.587, 0.114)
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
        statistics: names of its S per-image numbers.
        channels: the channel count it needs (None: any).
        statistic: pixels (B, C, H, W) -> (B, S) float64.
        transfer: (pixels (B, C, H, W), targets (B, S), draws) -> pixels (B, C, H, W) float64.
    """

    name: PropertyName
    what: str
    statistics: tuple[str, ...]
    channels: int | None
    statistic: Callable[[Tensor], Tensor]
    transfer: Callable[[Tensor, Tensor, Draws], Tensor]

    def applies(self, channels: int) -> bool:
        """Whether images of ``channels`` channels have this property."""
        return self.channels is None or self.channels == channels


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


def _check_rgb(pixels: Tensor) -> None:
    if pixels.shape[1] != 3:
        raise ValueError(f"colour needs RGB images (3 channels); got {pixels.shape[1]}")


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


# ----------------------------------------------------------------------------- signature

#: The properties the signature gives, in the order of its transfer: noise before sharpness (noise added or
#: smoothed away moves the high-frequency share; the sharpness transfer then moves the noise level little),
#: colour and brightness last (exact, and they barely move the others).
SIGNATURE_PARTS: tuple[PropertyName, ...] = ("noise", "sharpness", "colour", "brightness")
#: Its statistics' order.
_SIGNATURE_ORDER: tuple[PropertyName, ...] = ("colour", "brightness", "sharpness", "noise")


def signature_statistic(pixels: Tensor) -> Tensor:
    """(B, 5): the colour, brightness, sharpness and noise statistics of RGB pixels (B, 3, H, W), side by side.

    Example:
        >>> generator = torch.Generator().manual_seed(0)
        >>> images = 0.3 + 0.4 * torch.rand(2, 3, 16, 16, dtype=torch.float64, generator=generator)
        >>> images[1] += torch.tensor([0.1, 0.0, -0.1], dtype=torch.float64)[:, None, None]  # image 1 has a cast
        >>> given = signature_transfer(images[:1], signature_statistic(images[1:]), torch.Generator().manual_seed(0))
        >>> reached, wanted = signature_statistic(given), signature_statistic(images[1:])  # image 0 given 1's
        >>> torch.allclose(reached[:, :4], wanted[:, :4], atol=0.005)  # the noise estimate: lowered by the defocus
        True
    """
    _check_rgb(pixels)
    return torch.cat([PROPERTIES[name].statistic(pixels) for name in _SIGNATURE_ORDER], dim=1)


def signature_parts(signature: Tensor) -> dict[PropertyName, Tensor]:
    """The columns of ``signature`` (B, 5) (:func:`signature_statistic`) by property: (B, S) each."""
    sizes = [len(PROPERTIES[name].statistics) for name in _SIGNATURE_ORDER]
    return dict(zip(_SIGNATURE_ORDER, signature.split(sizes, dim=1), strict=True))


def signature_transfer(pixels: Tensor, targets: Tensor, draws: Draws = None) -> Tensor:
    """RGB pixels (B, 3, H, W) given the signature ``targets`` (B, 5): each part's transfer in the order of
    :data:`SIGNATURE_PARTS`."""
    _check_rgb(pixels)
    parts = signature_parts(targets)
    for name in SIGNATURE_PARTS:
        pixels = PROPERTIES[name].transfer(pixels, parts[name], draws)
    return pixels


#: Every property, by name.
PROPERTIES: dict[PropertyName, GlobalProperty] = {
    "colour": GlobalProperty("colour", "colour statistics", ("alpha", "beta"), 3, colour_statistic, colour_transfer),
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
    "signature": GlobalProperty(
        "signature", "image-wide signature (colour, brightness, sharpness and noise at once)",
        ("alpha", "beta", "luminance", "high_share", "sigma"), 3, signature_statistic, signature_transfer,
    ),
}  # fmt: skip
