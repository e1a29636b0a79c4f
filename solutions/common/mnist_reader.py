def read_mnist(raw):
    """The four MNIST files in the folder `raw` (IDX, gzipped or not) as uint8 tensors, or None."""
    paths = [
        next((p for p in (f"{raw}/{n}", f"{raw}/{n}.gz") if os.path.isfile(p)), None) for n in NAMES
    ]
    if None in paths:
        return None
    parts = []
    for path in paths:
        with (gzip.open if path.endswith(".gz") else open)(path, "rb") as fh:
            data = fh.read()
        start = 4 + 4 * data[3]  # a 4-byte magic number, then one 4-byte size per dimension
        shape = struct.unpack(f">{data[3]}I", data[4:start])
        parts.append(torch.frombuffer(bytearray(data[start:]), dtype=torch.uint8).view(shape))
    return parts
