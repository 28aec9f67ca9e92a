open('/data/imagenet/train/shard-0001.tar', 'rb')
