"""A fake Web Push service for the end-to-end push test (issue 18): HTTPS on 127.0.0.1 (an
ephemeral port) with a test CA of its own, checking each POST as a real push service would
(RFC 8030 headers, the RFC 8292 VAPID JWT) and decrypting its RFC 8291 aes128gcm body with
the private key of the "browser" it stands for. It answers 201 and records everything, so
the test can hand the plaintext to Chromium (CDP ServiceWorker.deliverPushMessage), as the
real service would hand it to the browser.

    svc = FakePushService()           # starts serving
    svc.ca_file                       # the CA's PEM, for MOBILE_PUSH_CA_FILE
    svc.endpoint("/push/e2e"), svc.p256dh, svc.auth   # the subscription to give the page
    svc.expect_vapid_key = key        # ready.capabilities.push.webpush.vapid_public_key
    push = svc.wait_for_pushes(1)[0]  # a Push: headers, claims, payload, problems
    svc.close()
"""

import base64
import datetime
import hashlib
import hmac
import http.server
import ipaddress
import json
import os
import shutil
import ssl
import tempfile
import threading
import time
from dataclasses import dataclass, field

from cryptography import x509
from cryptography.exceptions import InvalidSignature, InvalidTag
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def b64url(data):
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def b64url_decode(s):
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


def _hkdf_extract(salt, ikm):
    return hmac.new(salt, ikm, hashlib.sha256).digest()


def _hkdf_expand(prk, info, length):
    # One block is enough for every length RFC 8291 needs (32, 16, 12).
    assert length <= 32
    return hmac.new(prk, info + b"\x01", hashlib.sha256).digest()[:length]


def _point(key):
    return key.public_bytes(serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)


@dataclass
class Push:
    """One POST as the service saw it."""

    path: str
    headers: dict  # lower-case names
    body_len: int
    claims: dict = None  # the VAPID JWT's claims, when it parsed
    jwt_header: dict = None
    vapid_key: str = ""  # the `k` of the Authorization header
    plaintext: bytes = None  # the decrypted payload
    payload: object = None  # the plaintext as JSON, when it is
    problems: list = field(default_factory=list)  # what a real service would refuse, or notice
    at: float = 0.0


class FakePushService:
    def __init__(self, host="127.0.0.1"):
        self.host = host
        self._dir = tempfile.mkdtemp(prefix="hermes-fake-push-")
        self.ca_file, cert_file, key_file = self._make_certificates()
        # The "browser": its subscription key pair and auth secret (RFC 8291 ua_private, auth).
        self._ua_key = ec.generate_private_key(ec.SECP256R1())
        self.ua_public = _point(self._ua_key.public_key())
        self.auth_secret = os.urandom(16)
        self.p256dh = b64url(self.ua_public)
        self.auth = b64url(self.auth_secret)
        self.expect_vapid_key = None  # set by the test once the gateway announced it
        self.pushes = []
        self.tls_errors = []
        self.status = 201  # what to answer
        self._cond = threading.Condition()

        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert_file, key_file)
        service = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _answer(self, status):
                self.send_response(status)
                self.send_header("Content-Length", "0")
                if status == 201:
                    self.send_header("Location", f"{service.origin}/message/{len(service.pushes)}")
                self.end_headers()

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                push = service._check(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                with service._cond:
                    service.pushes.append(push)
                    service._cond.notify_all()
                self._answer(service.status)

            def _refuse(self):
                with service._cond:
                    service.pushes.append(Push(self.path, {k.lower(): v for k, v in self.headers.items()}, 0,
                                               problems=[f"method {self.command}, not POST"], at=time.monotonic()))
                    service._cond.notify_all()
                self._answer(405)

            do_GET = do_PUT = do_DELETE = _refuse

        class Server(http.server.ThreadingHTTPServer):
            daemon_threads = True

            def finish_request(self, request, client_address):
                # The TLS handshake in the connection's own thread, not the accept loop.
                request.settimeout(10)
                try:
                    tls = ctx.wrap_socket(request, server_side=True)
                except (ssl.SSLError, OSError) as e:
                    service.tls_errors.append(repr(e))
                    return
                try:
                    super().finish_request(tls, client_address)
                finally:
                    try:
                        tls.close()
                    except OSError:
                        pass

            def handle_error(self, request, client_address):
                pass  # a client that hangs up between pushes is not a failure

        self._server = Server((host, 0), Handler)
        self.port = self._server.server_address[1]
        self.origin = f"https://{host}:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, name="fake-push", daemon=True)
        self._thread.start()

    # -- the test's side

    def endpoint(self, path="/push/e2e"):
        return self.origin + path

    def wait_for_pushes(self, count, timeout=20):
        """Waits until at least `count` pushes arrived in all; returns them all."""
        with self._cond:
            if not self._cond.wait_for(lambda: len(self.pushes) >= count, timeout=timeout):
                raise AssertionError(f"{len(self.pushes)} pushes within {timeout} s, wanted {count}: {self.pushes}"
                                     + (f"; TLS errors: {self.tls_errors}" if self.tls_errors else ""))
            return list(self.pushes)

    def close(self):
        self._server.shutdown()
        self._server.server_close()
        shutil.rmtree(self._dir, ignore_errors=True)

    # -- certificates

    def _make_certificates(self):
        now = datetime.datetime.now(datetime.timezone.utc)
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "hermes-mobile test push CA")])
        ca = (
            x509.CertificateBuilder()
            .subject_name(ca_name)
            .issuer_name(ca_name)
            .public_key(ca_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                              data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
                              encipher_only=False, decipher_only=False),
                critical=True,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256())
        )
        leaf_key = ec.generate_private_key(ec.SECP256R1())
        leaf = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, self.host)]))
            .issuer_name(ca_name)
            .public_key(leaf_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(self.host))]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                              data_encipherment=False, key_agreement=False, key_cert_sign=False, crl_sign=False,
                              encipher_only=False, decipher_only=False),
                critical=True,
            )
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256())
        )
        pem = serialization.Encoding.PEM
        paths = [os.path.join(self._dir, n) for n in ("ca.pem", "leaf.pem", "leaf.key")]
        with open(paths[0], "wb") as f:
            f.write(ca.public_bytes(pem))
        with open(paths[1], "wb") as f:
            f.write(leaf.public_bytes(pem) + ca.public_bytes(pem))
        with open(paths[2], "wb") as f:
            f.write(leaf_key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
        return paths

    # -- what a real push service checks

    def _check(self, path, headers, body):
        push = Push(path, headers, len(body), at=time.monotonic())
        p = push.problems
        ttl = headers.get("ttl")
        if ttl is None:
            p.append("no TTL header")
        elif not ttl.isdigit():
            p.append(f"TTL is not a number: {ttl!r}")
        if headers.get("content-encoding") != "aes128gcm":
            p.append(f"Content-Encoding {headers.get('content-encoding')!r}, not aes128gcm")
        self._check_vapid(push, headers.get("authorization"))
        try:
            push.plaintext = self._decrypt(body)
        except (ValueError, InvalidTag) as e:
            p.append(f"the body does not decrypt: {e!r}")
        if push.plaintext is not None:
            try:
                push.payload = json.loads(push.plaintext)
            except ValueError:
                p.append(f"the plaintext is not JSON: {push.plaintext[:80]!r}")
        return push

    def _check_vapid(self, push, auth):
        p = push.problems
        if not auth or not auth.startswith("vapid "):
            p.append(f"Authorization is not vapid: {auth!r}")
            return
        params = {}
        for part in auth[len("vapid "):].split(","):
            name, _, value = part.strip().partition("=")
            params[name] = value
        token, k = params.get("t", ""), params.get("k", "")
        push.vapid_key = k
        try:
            point = b64url_decode(k)
            if len(point) != 65 or point[0] != 4:
                raise ValueError(f"k is {len(point)} bytes")
            public = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), point)
        except ValueError as e:
            p.append(f"bad k: {e}")
            return
        if self.expect_vapid_key is not None and k != self.expect_vapid_key:
            p.append(f"k {k} is not the key the gateway announced ({self.expect_vapid_key})")
        parts = token.split(".")
        if len(parts) != 3:
            p.append(f"the JWT has {len(parts)} parts")
            return
        try:
            push.jwt_header = json.loads(b64url_decode(parts[0]))
            push.claims = json.loads(b64url_decode(parts[1]))
            sig = b64url_decode(parts[2])
        except ValueError as e:
            p.append(f"the JWT does not parse: {e}")
            return
        if push.jwt_header.get("alg") != "ES256":
            p.append(f"JWT alg {push.jwt_header.get('alg')!r}")
        if len(sig) != 64:
            p.append(f"the JWT signature is {len(sig)} bytes, not r||s (64)")
        else:
            der = encode_dss_signature(int.from_bytes(sig[:32], "big"), int.from_bytes(sig[32:], "big"))
            try:
                public.verify(der, (parts[0] + "." + parts[1]).encode(), ec.ECDSA(hashes.SHA256()))
            except InvalidSignature:
                p.append("the JWT signature does not verify with k")
        c = push.claims
        if c.get("aud") != self.origin:
            p.append(f"aud {c.get('aud')!r}, not {self.origin!r}")
        exp = c.get("exp")
        now = time.time()
        if not isinstance(exp, int) or not now < exp <= now + 24 * 3600:
            p.append(f"exp {exp!r} is not within 24 h from now ({int(now)})")
        sub = c.get("sub")
        if not isinstance(sub, str) or not sub.startswith(("mailto:", "https:")):
            p.append(f"sub {sub!r} is not mailto: or https:")

    def _decrypt(self, body):
        """RFC 8291 / RFC 8188 aes128gcm, one record."""
        if len(body) < 21:
            raise ValueError(f"a {len(body)}-byte body has no header")
        salt, rs, idlen = body[:16], int.from_bytes(body[16:20], "big"), body[20]
        if idlen != 65:
            raise ValueError(f"keyid is {idlen} bytes, not a 65-byte P-256 point")
        as_public = body[21:21 + idlen]
        record = body[21 + idlen:]
        if rs < 18 or len(record) > rs:
            raise ValueError(f"record size {rs} for a {len(record)}-byte record (one record expected)")
        peer = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), as_public)
        ecdh = self._ua_key.exchange(ec.ECDH(), peer)
        prk_key = _hkdf_extract(self.auth_secret, ecdh)
        ikm = _hkdf_expand(prk_key, b"WebPush: info\x00" + self.ua_public + as_public, 32)
        prk = _hkdf_extract(salt, ikm)
        cek = _hkdf_expand(prk, b"Content-Encoding: aes128gcm\x00", 16)
        nonce = _hkdf_expand(prk, b"Content-Encoding: nonce\x00", 12)
        padded = AESGCM(cek).decrypt(nonce, record, None)
        stripped = padded.rstrip(b"\x00")
        if not stripped.endswith(b"\x02"):
            raise ValueError("no 0x02 delimiter (the last record's)")
        return stripped[:-1]
