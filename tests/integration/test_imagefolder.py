"""The use the project exists for: an unmodified torchvision ImageFolder and
a multi-worker DataLoader on the mount see exactly the dataset and decode
the same tensors as from a local copy."""

import pytest
import torch
import torch.utils.data
from torchvision import datasets, transforms

import dataset

CLASSES = ("cat", "dog", "fish")
PER_CLASS = 20


@pytest.fixture(scope="module")
def image_data(s3, make_bucket, tmp_path_factory):
    local = tmp_path_factory.mktemp("images")
    objects = dataset.image_folder(local, CLASSES, PER_CLASS)
    name = make_bucket("images")
    dataset.upload(s3, name, objects)
    return name, local, objects


def _load_all(root):
    ds = datasets.ImageFolder(str(root), transform=transforms.ToTensor())
    loader = torch.utils.data.DataLoader(ds, batch_size=8, num_workers=2,
                                         shuffle=False)
    images, labels = [], []
    for x, y in loader:
        images += list(x)
        labels += y.tolist()
    return ds, images, labels


def test_imagefolder_sees_exactly_the_classes(image_data, mount):
    name, _, objects = image_data
    m = mount(name)
    ds = datasets.ImageFolder(m.path)
    assert ds.classes == sorted(CLASSES)  # no ".hintfs"
    assert len(ds) == len(CLASSES) * PER_CLASS
    rel = sorted(p[len(m.path) + 1:] for p, _ in ds.samples)
    assert rel == sorted(objects)


def test_dataloader_decodes_the_same_tensors(image_data, mount):
    name, local, _ = image_data
    m = mount(name)
    torch.set_num_threads(1)
    ds_mnt, imgs_mnt, labels_mnt = _load_all(m.path)
    ds_loc, imgs_loc, labels_loc = _load_all(local)
    assert len(imgs_mnt) == len(ds_loc) == len(CLASSES) * PER_CLASS
    assert labels_mnt == labels_loc
    for i, (a, b) in enumerate(zip(imgs_mnt, imgs_loc)):
        assert a.shape == (3, 64, 64)
        assert torch.equal(a, b), f"sample {i} ({ds_mnt.samples[i][0]}) differs"
