# The dynamic linker cache. ldconfig lives in /sbin, which is not on a normal user's PATH.
for l in ldconfig /sbin/ldconfig /usr/sbin/ldconfig; do
  if command -v "$l" >/dev/null 2>&1; then exec "$l" -p; fi
done
echo "ldconfig not found" >&2
exit 127
