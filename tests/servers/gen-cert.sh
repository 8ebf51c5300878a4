#!/usr/bin/env bash
# Makes the certificates of the TLS tests: a private CA, a server
# certificate it signs, and an unrelated CA that must not be trusted.
#
# Usage: tests/servers/gen-cert.sh DIR [SAN]
#   DIR/ca.pem, DIR/ca.key            the private CA (self-signed)
#   DIR/server.pem, DIR/server.key    the server's, signed by it, for SAN
#                                     (default IP:127.0.0.1,DNS:localhost)
#   DIR/other-ca.pem                  another self-signed CA
# P-256 keys, valid for 2 days: these are throwaway test credentials, made
# fresh for each run and never committed.
set -euo pipefail

[ $# -ge 1 ] || { echo "usage: $0 DIR [SAN]" >&2; exit 2; }
dir=$1
san=${2:-IP:127.0.0.1,DNS:localhost}
command -v openssl >/dev/null || { echo "gen-cert.sh: openssl is missing (apt-get install openssl)" >&2; exit 1; }
mkdir -p "$dir"
cd "$dir"
umask 077

ca() { # ca NAME CN
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
		-days 2 -subj "/CN=$2" -keyout "$1.key" -out "$1.pem" \
		-addext basicConstraints=critical,CA:TRUE \
		-addext keyUsage=critical,keyCertSign,cRLSign 2>/dev/null
}

ca ca "hintfs test CA"
ca other-ca "hintfs untrusted CA"
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
	-subj "/CN=hintfs test server" -keyout server.key -out server.csr 2>/dev/null
printf 'subjectAltName=%s\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\nkeyUsage=critical,digitalSignature\n' \
	"$san" >server.ext
openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial \
	-days 2 -extfile server.ext -out server.pem 2>/dev/null
rm -f server.csr server.ext ca.srl
chmod 644 ca.pem other-ca.pem server.pem
