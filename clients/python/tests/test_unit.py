"""Unit tests without a server: tokens, deadlines, backoff, validation, errors."""

from __future__ import annotations

import os
import random
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import lockgate  # noqa: E402
from lockgate import _wire  # noqa: E402
from lockgate.errors import error_from_reply  # noqa: E402


class TestTokens(unittest.TestCase):
    def test_both_shapes(self) -> None:
        self.assertEqual(_wire.parse_token({"key": "k", "value": 42}), 42)
        self.assertEqual(_wire.parse_token(42), 42)
        self.assertEqual(_wire.parse_token(2**63 + 5), 2**63 + 5)  # JSON numbers past int64 stay exact
        self.assertEqual(_wire.parse_token(7.0), 7)
        self.assertIsNone(_wire.parse_token(None))
        self.assertIsNone(_wire.parse_token({"key": "k"}))

    def test_bad_tokens(self) -> None:
        for bad in (True, "x", 1.5, [], {"value": "abc"}):
            with self.assertRaises(ValueError, msg=repr(bad)):
                _wire.parse_token(bad)

    def test_holder_token_both_shapes(self) -> None:
        for tok in ({"key": "k", "value": 9}, 9):
            e = error_from_reply({"code": "held", "message": "m", "holder": {"owner": "a", "fencingToken": tok, "expiresIn": 1500}}, "k")
            self.assertIsInstance(e, lockgate.HeldError)
            self.assertEqual((e.owner, e.fencing_token, e.expires_in, e.code), ("a", 9, 1.5, "held"))


class TestDeadline(unittest.TestCase):
    def test_formula(self) -> None:
        # deadline = sent + ttl − (ttl/100 + 2 ms)
        self.assertAlmostEqual(_wire.deadline(100.0, 10.0), 100.0 + 10.0 - 0.1 - 0.002)
        self.assertAlmostEqual(_wire.deadline(0.0, 0.5), 0.5 - 0.005 - 0.002)
        self.assertAlmostEqual(_wire.deadline(5.0, 0.010), 5.0 + 0.010 - 0.0001 - 0.002)

    def test_before_server_expiry(self) -> None:
        for ttl in (0.01, 0.6, 3.0, 20.0, 86400.0):
            self.assertLess(_wire.deadline(0.0, ttl), ttl)

    def test_ms_rounds_down(self) -> None:
        self.assertEqual(_wire.ms(0.5), 500)
        self.assertEqual(_wire.ms(0.0109), 10)
        self.assertEqual(_wire.ms(20.0), 20000)
        self.assertEqual(_wire.ms(0.3), 300)  # 0.3*1000 is 299.99999999999994 in floats


class TestBackoff(unittest.TestCase):
    def test_bounds(self) -> None:
        rnd = random.Random(1)
        for attempt, ceiling in ((1, 0.05), (2, 0.1), (3, 0.2), (6, 1.6), (7, 2.0), (50, 2.0), (10**6, 2.0)):
            for _ in range(200):
                d = _wire.backoff(attempt, rand=rnd)
                self.assertGreaterEqual(d, 0.0)
                self.assertLessEqual(d, ceiling + 1e-12, f"attempt {attempt}")

    def test_full_jitter(self) -> None:
        rnd = random.Random(2)
        ds = [_wire.backoff(10, rand=rnd) for _ in range(500)]
        self.assertLess(min(ds), 0.2)  # full jitter reaches near zero
        self.assertGreater(max(ds), 1.8)  # and near the cap

    def test_attempt_zero(self) -> None:
        self.assertLessEqual(_wire.backoff(0), 0.05)


class TestValidation(unittest.TestCase):
    def test_keys(self) -> None:
        for bad in ("", "k" * 1025, None, 5):
            with self.assertRaises(lockgate.ValidationError) as cm:
                _wire.validate_key(bad)
            self.assertEqual(cm.exception.code, "invalid_key")
        _wire.validate_key("k" * 1024)
        _wire.validate_key("orders/42")

    def test_ttls(self) -> None:
        for bad in (0.0, 0.005, 0.0099, -1.0, 86401.0, True, "1"):
            with self.assertRaises(lockgate.ValidationError) as cm:
                _wire.validate_ttl(bad)
            self.assertEqual(cm.exception.code, "invalid_ttl")
        self.assertIsNone(_wire.validate_ttl(None))
        self.assertEqual(_wire.validate_ttl(0.01), 0.01)
        self.assertEqual(_wire.validate_ttl(3), 3.0)

    def test_handle(self) -> None:
        h = _wire.new_handle()
        self.assertRegex(h, r"^[0-9a-f]{32}$")
        self.assertNotEqual(h, _wire.new_handle())


class TestURLs(unittest.TestCase):
    def test_ws_url(self) -> None:
        self.assertEqual(_wire.ws_url("127.0.0.1:50051", False), "ws://127.0.0.1:50051/v1/ws")
        self.assertEqual(_wire.ws_url("127.0.0.1:50051", True), "wss://127.0.0.1:50051/v1/ws")
        self.assertEqual(_wire.ws_url("https://h:1", False), "wss://h:1/v1/ws")
        self.assertEqual(_wire.ws_url("ws://h:1/custom", False), "ws://h:1/custom")
        with self.assertRaises(ValueError):
            _wire.ws_url("ftp://h:1", False)

    def test_leader_addr(self) -> None:
        self.assertEqual(_wire.leader_addr({"error": {"code": "not_leader", "leader": {"id": "1", "addr": "h:1"}}}), "h:1")
        self.assertEqual(_wire.leader_addr({"code": "not_leader", "leader": {}}), "")
        self.assertEqual(_wire.leader_addr([]), "")


class TestErrors(unittest.TestCase):
    def test_mapping(self) -> None:
        cases = {
            "not_held": lockgate.NotHeldError, "not_found": lockgate.NotFoundError,
            "not_leader": lockgate.NotLeaderError, "timeout": lockgate.LockTimeoutError,
            "invalid_key": lockgate.ValidationError, "invalid_ttl": lockgate.ValidationError,
            "unavailable": lockgate.UnavailableError, "closed": lockgate.UnavailableError,
            "unauthorized": lockgate.UnauthorizedError, "internal": lockgate.LockgateError,
            "some_new_code": lockgate.LockgateError,
        }
        for code, cls in cases.items():
            e = error_from_reply({"code": code, "message": "m"}, "k")
            self.assertIs(type(e), cls, code)
            self.assertEqual(e.code, code)
        self.assertIsInstance(error_from_reply({"code": "timeout"}), TimeoutError)
        e = error_from_reply({"code": "not_leader", "leader": {"id": "2", "addr": "h:2"}})
        self.assertEqual((e.leader_id, e.leader_addr), ("2", "h:2"))
        self.assertEqual(error_from_reply(None).code, "internal")

    def test_tenants_codes(self) -> None:
        f = error_from_reply({"code": "forbidden", "message": "not yours"}, "k")
        self.assertIsInstance(f, lockgate.ForbiddenError)
        q = error_from_reply({"code": "quota_exceeded", "message": "at most 2", "quota": "sessions"})
        self.assertIsInstance(q, lockgate.QuotaExceededError)
        self.assertEqual((q.code, q.quota), ("quota_exceeded", "sessions"))
        self.assertIn("'sessions'", str(q))
        r = error_from_reply({"code": "rate_limited", "message": "slow down", "retryIn": 250}, "k")
        self.assertIsInstance(r, lockgate.RateLimitedError)
        self.assertEqual((r.code, r.retry_in, r.retryable), ("rate_limited", 0.25, True))
        self.assertNotIsInstance(r, lockgate.UnavailableError, "nothing was done: the outcome is known")
        self.assertEqual(error_from_reply({"code": "rate_limited"}).retry_in, 0.0)


if __name__ == "__main__":
    unittest.main()
