"""The S3 server the other tests stand on: path-style requests work and
signatures are verified, so a mount-error test that expects a refusal is
testing hintfs, not a lax server."""

import botocore.exceptions
import pytest


def test_put_get_list_path_style(s3, bucket):
    s3.put_object(Bucket=bucket, Key="dir/with space+plus.txt", Body=b"hello")
    body = s3.get_object(Bucket=bucket, Key="dir/with space+plus.txt")["Body"]
    assert body.read() == b"hello"
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]]
    assert keys == ["dir/with space+plus.txt"]


@pytest.mark.parametrize("creds, code", [
    ({"secret_key": "not-the-secret"}, "SignatureDoesNotMatch"),
    ({"access_key": "nosuchaccesskey"}, "InvalidAccessKeyId"),
])
def test_server_refuses_bad_credentials(rgw, bucket, creds, code):
    client = rgw.client(**creds)
    with pytest.raises(botocore.exceptions.ClientError) as e:
        client.list_objects_v2(Bucket=bucket)
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    assert e.value.response["Error"]["Code"] == code
