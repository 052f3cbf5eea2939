# Free space where vLLM writes: the Hugging Face cache, the model dir ($1, optional), vLLM's cache, /tmp.
# One line per path: label<TAB>path<TAB>avail_kb size_kb mount<TAB>inode_use%.
hf_home=${HF_HOME:-$HOME/.cache/huggingface}
report() {
  [ -n "$2" ] || return 0
  p=$2
  while [ ! -e "$p" ] && [ "$p" != "/" ]; do p=$(dirname "$p"); done
  space=$(df -P -k "$p" 2>/dev/null | awk 'NR==2 {print $4, $2, $6}')
  inodes=$(df -P -i "$p" 2>/dev/null | awk 'NR==2 {print $5}')
  [ -n "$space" ] && printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$space" "${inodes:--}"
  return 0
}
report hf_cache "${HF_HUB_CACHE:-$hf_home/hub}"
report model_dir "$1"
report vllm_cache "${VLLM_CACHE_ROOT:-$HOME/.cache/vllm}"
report tmp "${TMPDIR:-/tmp}"
