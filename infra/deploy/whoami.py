"""`make deploy`'s first step: say who will deploy where, or exactly what is missing."""

import sys

import boto3
from botocore.exceptions import BotoCoreError, ClientError

try:
    session = boto3.session.Session()
    if not session.region_name:
        sys.exit("no AWS region: set AWS_REGION (or a region in ~/.aws/config for your profile)")
    who = session.client("sts").get_caller_identity()
except (BotoCoreError, ClientError) as error:
    sys.exit(
        f"no usable AWS credentials ({error}): configure them with `aws configure`, "
        "`aws sso login`, AWS_PROFILE or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY"
    )
print(f"deploying as {who['Arn']} in {session.region_name}")
