"""``image_folder``: a folder of images, one sub-folder per class, no code needed.

Either ``path/train/<class>/*.png`` and ``path/test/<class>/*.png`` (a split of your own), or
``path/<class>/*.png`` of which a random ``test_fraction`` is held out (from ``split_seed``). Class names are
the training folder names, sorted (label = position). Images are decoded with Pillow (PNG, JPEG, BMP, GIF,
TIFF, WebP) to RGB (``grayscale: true``: one channel), resized to ``resize: [H, W]`` if given, scaled to
[0, 1] and standardised per channel with the training set's mean and std (``normalize``). Checked, each with
a one-line error: no class folder, a class without an image, a test class unknown to the training set, an
unreadable image, a FIFO, device or folder named like an image (refused before it is opened, so it cannot
block), an image beyond Pillow's pixel limit (a decompression bomb), images of different sizes without
``resize``.
"""

from __future__ import annotations

import stat
import warnings
from pathlib import Path

import numpy as np

from fedaug.data.base import Dataset, LoadContext, option_key
from fedaug.data.sources.files_common import check_split_options, holdout_described, locate, make_dataset
from fedaug.errors import ConfigError, DatasetError
from fedaug.registry import register

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp")


def _classes(root: Path) -> dict[str, list[Path]]:
    """Class folder name -> its image files (sorted), for every sub-folder of ``root``."""
    folders = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not folders:
        raise DatasetError(f"{root}: no class folders (expected {root}/<class>/<image>.png)")
    found = {}
    for folder in folders:
        files = sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
        for file in files:  # a FIFO named like an image would block the decoder (a device could be endless)
            if not file.is_file():
                raise DatasetError(
                    f"{file} is not a regular file ({_kind(file)}); an image folder holds image files only"
                )
        if not files:
            raise DatasetError(f"{folder}: class {folder.name!r} has no image ({', '.join(IMAGE_SUFFIXES)})")
        found[folder.name] = files
    return found


def _kind(path: Path) -> str:
    """What a path that is not a regular file is, in words."""
    mode = path.lstat().st_mode
    kinds = [
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISLNK, "a link to no file"),
    ]
    return next((word for test, word in kinds if test(mode)), "not a file")


def _decode(files: list[Path], grayscale: bool, resize: tuple[int, int] | None) -> np.ndarray:
    """The images ``[N, C, H, W]`` in [0, 1]; DatasetError for an unreadable image or mixed sizes."""
    from PIL import Image, UnidentifiedImageError

    images: list[np.ndarray] = []
    for file in files:
        try:
            with warnings.catch_warnings():  # past Pillow's pixel limit: refused, not decoded into memory
                warnings.simplefilter("error", Image.DecompressionBombWarning)
                with Image.open(file) as opened:
                    image = opened.convert("L" if grayscale else "RGB")
                    if resize is not None:
                        image = image.resize((resize[1], resize[0]), Image.Resampling.BILINEAR)
                    pixels = np.asarray(image, dtype=np.float32) / 255.0
        except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
            raise DatasetError(
                f"{file}: {exc} (Pillow's limit against decompression bombs); refusing it"
            ) from None
        except (OSError, UnidentifiedImageError, ValueError, SyntaxError) as exc:
            raise DatasetError(f"cannot decode {file} as an image ({exc})") from None
        if images and pixels.shape != images[0].shape:
            raise DatasetError(
                f"images of different sizes: {files[0]} is {images[0].shape[1]}x{images[0].shape[0]}, {file} "
                f"{pixels.shape[1]}x{pixels.shape[0]}; set data.resize=[H, W]"
            )
        images.append(pixels)
    stacked = np.stack(images)
    return stacked[:, None] if grayscale else stacked.transpose(0, 3, 1, 2)


def _labelled(classes: dict[str, list[Path]], names: list[str], where: Path) -> tuple[list[Path], np.ndarray]:
    unknown = sorted(set(classes) - set(names))
    if unknown:
        raise DatasetError(f"{where}: class {unknown[0]!r} is not a training class ({', '.join(names)})")
    files = [f for name in classes for f in classes[name]]
    labels = np.array([names.index(name) for name in classes for _ in classes[name]], dtype=np.int64)
    return files, labels


def _check_resize(name: str, resize: list[int] | None) -> tuple[int, int] | None:
    if resize is None:
        return None
    if (
        not isinstance(resize, list | tuple)
        or len(resize) != 2
        or any(isinstance(d, bool) or not isinstance(d, int) or d < 1 for d in resize)
    ):
        raise ConfigError(f"{option_key(name, 'resize')} must be [height, width] in pixels, got {resize!r}")
    return int(resize[0]), int(resize[1])


@register(
    "dataset",
    "image_folder",
    shape="[3 or 1,H,W]",
    size="yours",
    classes="yours",
    source="your folder of class folders",
    license="yours",
)
def image_folder(
    ctx: LoadContext,
    *,
    path: str = "",
    resize: list[int] | None = None,
    grayscale: bool = False,
    test_fraction: float = 0.2,
    split_seed: int = 0,
    normalize: bool = True,
) -> Dataset:
    """Loads a folder of class folders of images (see the module docstring).

    Args:
        ctx: where to look (``path`` relative to the current directory, else to the data dir).
        path: the folder (with ``train/`` and ``test/``, or the class folders themselves).
        resize: ``[height, width]`` every image is resized to (needed when their sizes differ).
        grayscale: one channel instead of RGB.
        test_fraction: share held out as the test set when there is no ``test/`` folder.
        split_seed: seed of that held-out split.
        normalize: standardise each channel with the training set's mean and std.
    """
    check_split_options(ctx.name, test_fraction, split_seed)
    size = _check_resize(ctx.name, resize)
    root = locate(ctx, path, "my_images/")
    if not root.is_dir():
        raise DatasetError(f"dataset {ctx.name!r}: {root} is not a folder")
    split_folders = (root / "train").is_dir() and (root / "test").is_dir()
    train = _classes(root / "train" if split_folders else root)
    names = sorted(train)
    files, labels = _labelled(train, names, root)
    x = _decode(files, grayscale, size)
    test_files: list[Path] = []
    if split_folders:
        test_files, test_labels = _labelled(_classes(root / "test"), names, root / "test")
        # decoded after one training image, so a test image of another size is the same one-line error
        arrays = (x, labels, _decode([*files[:1], *test_files], grayscale, size)[1:], test_labels)
        how = "train/ and test/ folders"
    else:
        arrays, how = holdout_described(x, labels, test_fraction, split_seed)
    return make_dataset(
        ctx.name,
        arrays,
        class_names=names,
        num_classes=None,
        normalize=normalize,
        modality="image",
        source=f"{root}: {len(files)} images, {how}",
        files=[*files, *test_files],
    )
