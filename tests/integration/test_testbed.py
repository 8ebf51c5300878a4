"""The test bed's own module (tests/servers/testbed.py), which the tests,
the benchmark and the credential soak share: the mount table they wait on
and unmount by, the env file they find the RGW by, the page-cache drops
their cold reads rest on. Needs no mount and no server."""

import os

import pytest

import testbed

# Two lines as proc(5) writes them: optional fields before " - ", a mount
# point with a space and a source with a tab (octal escapes), and a second
# mount on top of the first.
MOUNTINFO = (
    "36 35 98:0 / /mnt/data\\040set rw,nosuid,nodev shared:7 master:1 - "
    "fuse.hintfs s3://bk/train\\011x ro,user_id=0,group_id=0,allow_other\n"
    "37 36 0:52 / /mnt/data\\040set ro,relatime - tmpfs tmpfs rw,size=4k\n"
)


def test_mountinfo_fields_are_unescaped_and_split():
    first, top = testbed.parse_mountinfo(MOUNTINFO)
    assert first == testbed.MountEntry(
        "/mnt/data set", ["rw", "nosuid", "nodev"], "fuse.hintfs",
        "s3://bk/train\tx", ["ro", "user_id=0", "group_id=0", "allow_other"])
    assert (top.point, top.fstype, top.options) == \
        ("/mnt/data set", "tmpfs", ["ro", "relatime"])


def test_mount_at_names_what_is_mounted_there(tmp_path):
    proc = testbed.mount_at("/proc")
    assert proc is not None and proc.fstype == "proc"
    assert testbed.mounted("/proc/../proc")  # the real path is compared
    assert testbed.mount_at(tmp_path) is None and not testbed.mounted(tmp_path)


def test_env_file_of_rgw_sh(tmp_path):
    env = tmp_path / "env"
    env.write_text("# written by rgw.sh\nAWS_ENDPOINT_URL=http://127.0.0.1:1\n"
                   "AWS_ACCESS_KEY_ID=a=b\n\nnot a pair\n")
    assert testbed.read_env(env) == {"AWS_ENDPOINT_URL": "http://127.0.0.1:1",
                                     "AWS_ACCESS_KEY_ID": "a=b"}
    rgw = testbed.Rgw(tmp_path).attach()
    assert rgw.endpoint == "http://127.0.0.1:1" and rgw.region == "us-east-1"
    rgw.stop()  # it did not start it: nothing is stopped


def test_drop_file_pages(tmp_path):
    (tmp_path / "a").write_bytes(b"x" * 8192)
    assert testbed.drop_file_pages(tmp_path, ["a"]) == 0
    with pytest.raises(FileNotFoundError):
        testbed.drop_file_pages(tmp_path, ["a", "gone"])
    assert testbed.drop_file_pages(tmp_path, ["gone", "a"],
                                   missing_ok=True) == 1


@pytest.mark.skipif(os.geteuid() != 0, reason="drop_caches needs root")
@pytest.mark.serial
def test_drop_page_cache_as_root():
    assert testbed.drop_page_cache()
