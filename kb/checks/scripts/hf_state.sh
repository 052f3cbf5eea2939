# Hugging Face access without revealing the token: where a token is, offline mode, cached models.
hf_home=${HF_HOME:-$HOME/.cache/huggingface}
hub=${HF_HUB_CACHE:-$hf_home/hub}
token_var=none
for v in HF_TOKEN HUGGING_FACE_HUB_TOKEN HUGGINGFACE_HUB_TOKEN; do
  eval "val=\${$v:-}"
  if [ -n "$val" ]; then token_var=$v; break; fi
done
echo "token_var=$token_var"
if [ -s "${HF_TOKEN_PATH:-$hf_home/token}" ]; then echo "token_file=1"; else echo "token_file=0"; fi
case "${HF_HUB_OFFLINE:-}${TRANSFORMERS_OFFLINE:-}" in *1*|*[Tt][Rr][Uu][Ee]*|*[Oo][Nn]*) echo "offline=1" ;; *) echo "offline=0" ;; esac
echo "hub_cache=$hub"
n=0
if [ -d "$hub" ]; then n=$(find "$hub" -maxdepth 1 -name 'models--*' 2>/dev/null | wc -l); fi
echo "cached_models=$n"
# $1: the model the host serves (the inventory's served_model), $2: its model_dir. Only a Hub repo id
# ("org/name", not a path) can need a token, and not when the weights are local or already cached.
model=${1:-}
case "$model" in
  ""|/*|./*|../*|~*|*" "*) echo "model_hub=0" ;;
  */*) echo "model_hub=1" ;;
  *) echo "model_hub=0" ;;
esac
if [ -n "${2:-}" ] && [ -d "$2" ]; then echo "model_local=1"; else echo "model_local=0"; fi
slug=$(printf '%s' "$model" | sed 's|/|--|g')
if [ -n "$model" ] && [ -d "$hub/models--$slug" ]; then echo "model_cached=1"; else echo "model_cached=0"; fi
