"""libllama through ctypes: load a GGUF on a ggml device, decode token ids, and capture every node the
device computes (through the scheduler's eval callback) for the model tier (``conform model``)."""
