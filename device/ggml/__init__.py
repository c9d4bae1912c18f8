"""ggml devices through ctypes: any device ggml's backend registry offers (CPU, CANN0, CUDA0...)."""
