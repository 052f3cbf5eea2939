# Shared by the fake tools: find a data file in $FAKEGPU_DIRS (profile first, then the healthy base).
find_data() {
  old_ifs=$IFS; IFS=:
  for d in $FAKEGPU_DIRS; do
    if [ -e "$d/$1" ]; then IFS=$old_ifs; printf '%s\n' "$d/$1"; return 0; fi
  done
  IFS=$old_ifs; return 1
}
