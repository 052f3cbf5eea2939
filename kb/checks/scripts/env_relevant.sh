# Environment variables that matter for vLLM, CUDA, NCCL and Hugging Face. The runner redacts values
# before storing them; secret-named variables are masked by the parser as well.
env | grep -E '^(CUDA_|NCCL_|VLLM_|TORCH_|PYTORCH_|HF_|HUGGING_?FACE|TRANSFORMERS_|OMP_|MKL_|NVIDIA_|GLOO_|NSIGHT_|COMPUTE_PROFILE|OPENCL_PROFILE|LD_LIBRARY_PATH=|LD_PRELOAD=|PATH=|VIRTUAL_ENV=|CONDA_PREFIX=|TRITON_|RAY_|TP_SOCKET_IFNAME|MASTER_ADDR|MASTER_PORT)' | sort
exit 0
