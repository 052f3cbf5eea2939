# vLLM processes: API servers and the EngineCore/Worker processes they spawn. grep exits 1 if none.
ps -ww -eo pid=,ppid=,etimes=,args= | grep -E 'vllm[ ]+serve|vllm[.]entrypoints|VLLM[:][:]|-m vllm( |$)'
