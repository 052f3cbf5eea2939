"""Stand-in for vllm.platforms: like the real CUDA platform, import_kernels() imports vllm._C and logs
(does not raise) a failed import."""

import logging

logger = logging.getLogger("vllm.platforms")


class CudaPlatform:
    @classmethod
    def import_kernels(cls):
        try:
            import vllm._C  # noqa: F401
        except ImportError as e:
            logger.warning("Failed to import from vllm._C: %r", e)


current_platform = CudaPlatform()
