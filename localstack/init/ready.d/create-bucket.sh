#!/usr/bin/env bash
# Run by LocalStack once S3 is ready: create the model store bucket.
set -euo pipefail
bucket="${MODELFN_BUCKET:-models}"
if ! awslocal s3api head-bucket --bucket "$bucket" 2>/dev/null; then
    awslocal s3api create-bucket --bucket "$bucket"
fi
echo "modelfn: bucket s3://$bucket is ready"
