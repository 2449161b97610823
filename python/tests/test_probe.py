"""dsa_sim.probe against a tiny OpenAI-compatible server on loopback (http.server in a thread):
the table, transcript and JSON equal the command line's on the same server, a dry run sends
nothing, and bad input raises ValueError with the command line's message."""

import http.server
import json
import threading

import pytest

import dsa_sim


class Handler(http.server.BaseHTTPRequestHandler):
    """/v1/models, vLLM's /tokenize (one token per word plus BOS) and /v1/completions, whose model
    finds every needle at depth below 0.5 of the prompt and none beyond."""

    sent = 0

    def log_message(self, *args):
        pass

    def reply(self, code, obj):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/v1/models":
            return self.reply(200, {"object": "list", "data": [{"id": "py-test-model"}]})
        self.reply(404, {"detail": "Not Found"})

    def do_POST(self):
        req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path == "/tokenize":
            return self.reply(200, {"count": 1 + len(req["prompt"].split())})
        if self.path == "/v1/completions":
            Handler.sent += 1
            prompt = req["prompt"]
            key = prompt.rsplit("What is the special magic number for ", 1)[1].split(" ")[0]
            mark = f"special magic numbers for {key} is: "
            at = prompt.find(mark)
            value = prompt[at + len(mark):].split(".")[0]
            found = at < len(prompt) / 2
            n = 1 + len(prompt.split())
            return self.reply(200, {"choices": [{"text": f" {value}." if found else " no idea"}], "usage": {"prompt_tokens": n}})
        self.reply(404, {"detail": "Not Found"})


@pytest.fixture(scope="module")
def server():
    s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    t = threading.Thread(target=s.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{s.server_address[1]}"
    s.shutdown()


def rows(path):
    with open(path) as f:
        return [l for l in f.read().splitlines() if not l.startswith("#")]


def test_probe_equals_the_command_line(server, cli, tmp_path):
    py = dsa_sim.probe(server, tmp_path / "py", context_len=[1000, 2000], depth=[0.2, 0.8], trials=3, labels={"build": "main"})
    c = cli.json("probe", "--url", server, "--out", str(tmp_path / "cli"), "--context-len", "1000,2000", "--depth", "0.2,0.8", "--trials", "3", "--label", "build=main")
    assert py["rows"] == c["rows"] and py["model"] == "py-test-model" and py["token_count"] == "tokenize"
    assert rows(py["measured"]) == rows(c["measured"])
    assert rows(py["measured"])[0] == "context_len,index_topk,depth,repeat,needle_tokens,build,trials,hits"
    # Needles in the first half are found, the others not.
    for r in py["rows"]:
        assert r["hits"] == (r["trials"] if float(r["depth"]) < 0.5 else 0)
    with open(py["transcript"]) as f:
        assert len(f.read().splitlines()) == 12


def test_dry_run_and_bad_input(server, cli, tmp_path):
    before = Handler.sent
    d = dsa_sim.probe(server, context_len="2K..64K:x2", depth=[0.1, 0.5, 0.9], trials=5, dry_run=True)
    assert d["requests"] == 90 and Handler.sent == before
    assert d == cli.json("probe", "--url", server, "--context-len", "2K..64K:x2", "--trials", "5", "--dry-run")
    with pytest.raises(ValueError) as e:
        dsa_sim.probe(server, tmp_path / "x", context_len=2000, depth=1.5)
    assert str(e.value) == cli.error("probe", "--url", server, "--out", str(tmp_path / "x"), "--context-len", "2000", "--depth", "1.5")


def test_verdict_joins_several_tables_as_the_command_line_does(server, cli, tmp_path):
    a = dsa_sim.probe(server, tmp_path / "a", context_len=[4000, 8000], depth=[0.2, 0.8], trials=4, labels=["build=main"])
    b = dsa_sim.probe(server, tmp_path / "b", context_len=[4000, 8000], depth=[0.2, 0.8], trials=4, labels=["build=fork"])
    py = dsa_sim.verdict(data=[a["measured"], b["measured"]], preset="deepseek-v4-flash", stack="none")
    c = cli.json("verdict", "--preset", "deepseek-v4-flash", "--stack", "none", "--data", a["measured"], "--data", b["measured"])
    assert py == c
    assert [t["column"] for t in py["conditions"]] == ["build"]


def word_tokenizer(path):
    """A tokenizer.json counting as the server above does: one token a whitespace-separated word
    (a word-level model whose every word is `<unk>`) and a BOS."""
    special = lambda i, c: {"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": True}
    path.write_text(json.dumps({
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [special(0, "<unk>"), special(1, "<s>")],
        "normalizer": None, "pre_tokenizer": {"type": "WhitespaceSplit"},
        "post_processor": {"type": "TemplateProcessing",
                           "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
                           "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
                           "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
        "decoder": None, "model": {"type": "WordLevel", "vocab": {"<unk>": 0, "<s>": 1}, "unk_token": "<unk>"},
    }))
    return path


def test_probe_with_a_local_tokenizer_equals_the_command_line(server, cli, tmp_path):
    tok = word_tokenizer(tmp_path / "tokenizer.json")
    py = dsa_sim.probe(server, tmp_path / "py", context_len=[1000, 2000], depth=[0.2, 0.8], trials=2, tokenizer=tok)
    c = cli.json("probe", "--url", server, "--out", str(tmp_path / "cli"), "--context-len", "1000,2000", "--depth", "0.2,0.8", "--trials", "2", "--tokenizer", str(tok))
    assert py["token_count"] == "tokenizer" and py["rows"] == c["rows"]
    assert rows(py["measured"]) == rows(c["measured"])
    with open(py["transcript"]) as f:
        for line in f:
            r = json.loads(line)
            assert r["local_tokens"] == r["prompt_tokens"] and abs(r["prompt_tokens"] - r["target_tokens"]) <= 0.01 * r["target_tokens"]
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    with pytest.raises(ValueError) as e:
        dsa_sim.probe(server, tmp_path / "x", context_len=2000, tokenizer=bad)
    assert str(e.value) == cli.error("probe", "--url", server, "--out", str(tmp_path / "x"), "--context-len", "2000", "--tokenizer", str(bad))


def test_until_decided_equals_the_command_line(server, cli, tmp_path):
    kw = dict(context_len=[1000, 2000], depth=[0.2, 0.8], trials=10, until_decided=True, set={"stack": "none"}, budget=400)
    py = dsa_sim.probe(server, tmp_path / "py", **kw)
    c = cli.json("probe", "--url", server, "--out", str(tmp_path / "cli"), "--context-len", "1000,2000", "--depth", "0.2,0.8", "--trials", "10", "--until-decided", "--set", "stack=none", "--budget", "400")
    assert py["call"] == c["call"] and py["stop"] == c["stop"] and py["requests"] == c["requests"]
    assert py["requests"] <= 400
    with open(py["report"]) as f:
        assert f"**call: {py['call']}**" in f.read()
    with pytest.raises(ValueError, match="budget"):
        dsa_sim.probe(server, tmp_path / "small", context_len=[1000, 2000], trials=100, until_decided=True, budget=10)
