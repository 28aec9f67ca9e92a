buf = bytearray(1 << 60)
