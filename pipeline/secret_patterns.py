"""The building blocks of secret detection, shared by the header, URL and text redaction
(`pipeline.redact`) and the masking of bodies and stored prompt text (`pipeline.body_secrets`):
the rule for names that carry a credential, the shapes of keys, and the same-length mask.
`pipeline.redact`'s docstring states the name rule in words."""

from __future__ import annotations

REDACTED = "[REDACTED]"

# --- the name rule, as a regex usable both on a whole name and inside free text ---------------
_WORD = r"[a-z0-9]+"
SEP = r"[-_.]"
OWNERS = (
    "api|access|auth|secret|private|client|account|session|subscription|service|master|admin"
    "|virtual|functions?"  # Azure Functions' `x-functions-key`
    # whose key by provider or tool: `x-openai-key`, `x-llm-key`, `anthropic_key`
    "|llm|openai|anthropic|claude|gemini|google|groq|mistral|cohere|deepseek|openrouter|azure"
    "|bedrock|aws|together|fireworks|xai|hf|huggingface|provider|model|user|app|bot|proxy|gateway"
)
_LAST_WORD = (
    rf"[a-z0-9]*(?:token|secret|passw(?:or)?d|apikey|(?:{OWNERS}){SEP}?key)"
    r"|auth|credentials?|signature|sig|cookie|pass|pwd"
)
_ANY_WORD = r"authorization|cookie|passw(?:or)?d"
# A secret name that is not just `key` (kept apart: `key: value` in free text is too common).
NAME = (
    rf"(?:{_WORD}{SEP})*(?:{_LAST_WORD})"
    rf"|(?:{_WORD}{SEP})*(?:{_ANY_WORD})(?:{SEP}{_WORD})*"
)

# Key shapes, recognised by value wherever they appear: OpenAI `sk-` / `sk-proj-`, Anthropic
# `sk-ant-`, Groq `gsk_`, xAI `xai-`, AWS access key ids `AKIA`/`ASIA`, Google API keys `AIza`,
# GitHub tokens `ghp_`/`github_pat_`, Slack `xox?-`, Hugging Face `hf_`, and JWTs (three base64url
# parts, the first two JSON objects: `eyJ`). Not preceded by a letter, digit, `_` or `-`, so a word
# such as `task-...` or `disk-...` is never taken for a key.
KEY_SHAPES = (
    r"sk-ant-[A-Za-z0-9_-]{8,}|sk-[A-Za-z0-9_-]{16,}|gsk_[A-Za-z0-9]{20,}|xai-[A-Za-z0-9]{20,}"
    r"|A[KS]IA[0-9A-Z]{16}|AIza[0-9A-Za-z_-]{30,}|ghp_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,}"
    r"|xox[abposr]-[A-Za-z0-9-]{10,}|hf_[A-Za-z0-9]{30,}"
    r"|eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"
)
# A key starts after a character that cannot be part of it, or after a JSON escape: prompt text
# is stored as JSON, where a key on a line of its own follows `\n` (the letter n), and one after
# a quote may follow `\u0022`.
KEY_BOUNDARY = r"(?:(?<![A-Za-z0-9_-])|(?<=\\[nrtbf])|(?<=\\u[0-9a-fA-F]{4}))"
# A name counts where a name can start: after a character that is not part of one, or after a
# JSON escape (prompt text is stored as JSON: a `.env` line follows `\n`, the letter n).
NAME_BOUNDARY = r"(?:(?<![\w.])|(?<=\\[nrtbf])|(?<=\\u[0-9a-fA-F]{4}))"
# A PEM private key (`-----BEGIN RSA PRIVATE KEY-----`, OPENSSH, ENCRYPTED, PGP ... BLOCK): its
# body is base64 over lines, with `Proc-Type: 4,ENCRYPTED` headers in the old form; it ends at
# `-----END`, or where a cut excerpt or a JSON string ends.
PEM_HEAD = r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY[A-Z ]*-----"
# (an escape is taken whole, a run of backslashes with the letter after it: ending on one would
# leave the quote after it escaped, and the JSON around it broken)
PEM_BODY = r"(?:[A-Za-z0-9+/=\s:,]|\\+[^\"\\]|-[A-Za-z0-9])+"
URL_SCHEME = r"(?i:[a-z][a-z0-9+.-]*://)"
# user:password@ (a password may hold an unencoded `/`; not `host:443/path@...`, a port).
USERINFO_VALUE = r'(?:[^/\s@"\\<>]+|[^/\s@"\\<>:]+:(?![0-9]+[/"\\])[^\s@"\\<>]+)'
# RE2 has no look-ahead: in stored prompt text a `host:443/path@v1` loses host and path too.
TEXT_USERINFO = r'(?:[^/\s@"\\<>]+|[^/\s@"\\<>:]+:[^\s@"\\<>]+)'


def mask_of(n: int) -> bytes:
    """A mask of `n` bytes: `[REDACTED***]` where it fits, else `*` * n (byte counts and JSON
    validity stay as they were)."""
    return b"[REDACTED" + b"*" * (n - 10) + b"]" if n >= 10 else b"*" * n
