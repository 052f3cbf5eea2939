"""Rules over facts read from a log, declared in case YAML (`rules: [{when: "...", says: "..."}]`).

A tiny expression language, parsed here into an AST and evaluated by walking it; nothing is ever passed
to eval(). Grammar (lowest precedence first):

    expr    := and ("or" and)*
    and     := not ("and" not)*
    not     := "not" not | compare
    compare := sum (("<" | "<=" | ">" | ">=" | "==" | "!=") sum)?
    sum     := product (("+" | "-") product)*
    product := unary (("*" | "/" | "%") unary)*
    unary   := "-" unary | atom
    atom    := NUMBER | 'text' | "text" | true | false | FACT_NAME | "(" expr ")"

FACT_NAME is one of FACTS (the fields of bot.models.LogFacts; a test keeps the two in step). A fact the
log does not state is unknown, and a comparison with an unknown side is neither true nor false: a rule
fires only when the log proves it (three-valued logic: unknown `or` true = true, unknown `and` false = false).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

FactKind = Literal["number", "text", "bool"]
FactValue = float | int | str | bool

# Names a rule may use, and their kind (kept equal to bot.models.LogFacts by tests/test_facts_rules.py).
FACTS: dict[str, FactKind] = {
    "vllm_version": "text",
    "torch_version": "text",
    "cuda_version": "text",
    "driver_version": "text",
    "python_version": "text",
    "model": "text",
    "dtype": "text",
    "quantization": "text",
    "kv_cache_dtype": "text",
    "max_model_len": "number",
    "tensor_parallel_size": "number",
    "pipeline_parallel_size": "number",
    "gpu_memory_utilization": "number",
    "enforce_eager": "bool",
    "block_size": "number",
    "gpu_name": "text",
    "compute_capability": "number",  # "8.0" in LogFacts, compared as a number
    "gpu_count": "number",
    "num_attention_heads": "number",
    "total_gpu_memory_gib": "number",
    "weights_gib": "number",
    "activation_peak_gib": "number",
    "non_torch_gib": "number",
    "kv_cache_gib": "number",
    "kv_cache_tokens": "number",
    "gpu_blocks": "number",
    "cpu_blocks": "number",
    "max_concurrency": "number",
    "estimated_max_model_len": "number",
    "kv_cache_needed_gib": "number",
    "port": "number",
    "launch_command": "text",
    "platform": "text",
}

MAX_RULE_CHARS = 300
_TOKEN = re.compile(
    r"\s*(?:(?P<num>\d+(?:\.\d+)?)|(?P<str>'[^']*'|\"[^\"]*\")|(?P<name>[A-Za-z_]\w*)|"
    r"(?P<op><=|>=|==|!=|[<>+\-*/%()]))"
)
_COMPARE = ("<", "<=", ">", ">=", "==", "!=")
_SYMBOL = {"*": "×", "/": "÷", "<=": "≤", ">=": "≥", "!=": "≠", "==": "="}


class RuleError(ValueError):
    """A rule that does not parse or names an unknown fact; the message says where."""


@dataclass(frozen=True)
class Num:
    value: float


@dataclass(frozen=True)
class Text:
    value: str


@dataclass(frozen=True)
class Bool:
    value: bool


@dataclass(frozen=True)
class Fact:
    name: str


@dataclass(frozen=True)
class Neg:
    operand: Node


@dataclass(frozen=True)
class Arith:
    op: str  # + - * / %
    left: Node
    right: Node


@dataclass(frozen=True)
class Compare:
    op: str  # < <= > >= == !=
    left: Node
    right: Node


@dataclass(frozen=True)
class Logic:
    op: str  # and / or
    operands: tuple[Node, ...]


@dataclass(frozen=True)
class Not:
    operand: Node


Node = Num | Text | Bool | Fact | Neg | Arith | Compare | Logic | Not


def _tokens(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise RuleError(f"unexpected character {text[pos:].lstrip()[:1]!r} at position {pos + 1}")
        kind = m.lastgroup or ""
        out.append((kind, m.group(kind)))
        pos = m.end()
    return out


class _Parser:
    def __init__(self, text: str):
        if len(text) > MAX_RULE_CHARS:
            raise RuleError(f"rule longer than {MAX_RULE_CHARS} characters")
        self.toks = _tokens(text)
        self.i = 0

    def peek(self) -> str | None:
        return self.toks[self.i][1] if self.i < len(self.toks) else None

    def take(self) -> tuple[str, str]:
        if self.i >= len(self.toks):
            raise RuleError("rule ends too early")
        tok = self.toks[self.i]
        self.i += 1
        return tok

    def parse(self) -> Node:
        if not self.toks:
            raise RuleError("empty rule")
        node = self.expr()
        if self.i != len(self.toks):
            raise RuleError(f"unexpected {self.toks[self.i][1]!r}")
        return node

    def expr(self) -> Node:
        parts = [self.conj()]
        while self.peek() == "or":
            self.take()
            parts.append(self.conj())
        return parts[0] if len(parts) == 1 else Logic("or", tuple(parts))

    def conj(self) -> Node:
        parts = [self.neg()]
        while self.peek() == "and":
            self.take()
            parts.append(self.neg())
        return parts[0] if len(parts) == 1 else Logic("and", tuple(parts))

    def neg(self) -> Node:
        if self.peek() == "not":
            self.take()
            return Not(self.neg())
        return self.compare()

    def compare(self) -> Node:
        left = self.sum()
        op = self.peek()
        if op in _COMPARE:
            self.take()
            return Compare(op, left, self.sum())
        return left

    def sum(self) -> Node:
        node = self.product()
        while self.peek() in ("+", "-"):
            op = self.take()[1]
            node = Arith(op, node, self.product())
        return node

    def product(self) -> Node:
        node = self.unary()
        while self.peek() in ("*", "/", "%"):
            op = self.take()[1]
            node = Arith(op, node, self.unary())
        return node

    def unary(self) -> Node:
        if self.peek() == "-":
            self.take()
            return Neg(self.unary())
        return self.atom()

    def atom(self) -> Node:
        kind, tok = self.take()
        if kind == "num":
            return Num(float(tok))
        if kind == "str":
            return Text(tok[1:-1])
        if tok == "(":
            node = self.expr()
            if self.peek() != ")":
                raise RuleError("missing ')'")
            self.take()
            return node
        if kind == "name":
            if tok in ("true", "false"):
                return Bool(tok == "true")
            if tok in ("and", "or", "not"):
                raise RuleError(f"{tok!r} needs something before it")
            if tok not in FACTS:
                raise RuleError(f"unknown fact {tok!r}; known facts: {', '.join(sorted(FACTS))}")
            return Fact(tok)
        raise RuleError(f"unexpected {tok!r}")


def _kind(node: Node) -> FactKind | Literal["logic"]:
    """Static type of a node; raises RuleError on arithmetic over text or a text/number comparison."""
    if isinstance(node, Num | Neg | Arith):
        if isinstance(node, Neg) and _kind(node.operand) != "number":
            raise RuleError("'-' needs a number")
        if isinstance(node, Arith) and (_kind(node.left) != "number" or _kind(node.right) != "number"):
            raise RuleError(f"{node.op!r} needs numbers on both sides")
        return "number"
    if isinstance(node, Text):
        return "text"
    if isinstance(node, Bool):
        return "bool"
    if isinstance(node, Fact):
        return FACTS[node.name]
    if isinstance(node, Compare):
        left, right = _kind(node.left), _kind(node.right)
        if left != right:
            raise RuleError(f"cannot compare {left} with {right}")
        if left != "number" and node.op not in ("==", "!="):
            raise RuleError(f"{node.op!r} compares numbers only")
        return "logic"
    operands = (node.operand,) if isinstance(node, Not) else node.operands
    for op in operands:
        if _kind(op) not in ("logic", "bool"):
            raise RuleError("'and', 'or' and 'not' need comparisons on both sides")
    return "logic"


def parse_rule(text: str) -> Node:
    """Rule text → AST whose result is true/false; RuleError names what is wrong."""
    node = _Parser(text).parse()
    if _kind(node) not in ("logic", "bool"):
        raise RuleError("a rule must be a comparison (e.g. gpu_blocks == 0), not a bare value")
    return node


def fact_names(node: Node) -> set[str]:
    if isinstance(node, Fact):
        return {node.name}
    if isinstance(node, Neg | Not):
        return fact_names(node.operand)
    if isinstance(node, Arith | Compare):
        return fact_names(node.left) | fact_names(node.right)
    if isinstance(node, Logic):
        return set().union(*(fact_names(o) for o in node.operands))
    return set()


# -- evaluation ------------------------------------------------------------------------------------------


def _value(node: Node, facts: Mapping[str, FactValue | None]) -> FactValue | None:
    if isinstance(node, Num | Text | Bool):
        return node.value
    if isinstance(node, Fact):
        raw = facts.get(node.name)
        if raw is None:
            return None
        if FACTS[node.name] == "number" and not isinstance(raw, bool):
            try:
                return float(raw)
            except (TypeError, ValueError):
                return None
        return raw
    if isinstance(node, Neg):
        v = _value(node.operand, facts)
        return None if v is None else -float(v)
    if isinstance(node, Arith):
        a, b = _value(node.left, facts), _value(node.right, facts)
        if a is None or b is None:
            return None
        x, y = float(a), float(b)
        if node.op == "+":
            return x + y
        if node.op == "-":
            return x - y
        if node.op == "*":
            return x * y
        if y == 0:
            return None  # division by zero proves nothing
        return x / y if node.op == "/" else x % y
    return _truth(node, facts)


def _truth(node: Node, facts: Mapping[str, FactValue | None]) -> bool | None:
    if isinstance(node, Bool):
        return node.value
    if isinstance(node, Compare):
        a, b = _value(node.left, facts), _value(node.right, facts)
        if a is None or b is None:
            return None
        if isinstance(a, str) or isinstance(b, str):
            x, y = str(a).lower(), str(b).lower()
            return (x == y) if node.op == "==" else (x != y)
        fa, fb = float(a), float(b)
        return {"<": fa < fb, "<=": fa <= fb, ">": fa > fb, ">=": fa >= fb, "==": fa == fb, "!=": fa != fb}[node.op]
    if isinstance(node, Not):
        v = _truth(node.operand, facts)
        return None if v is None else not v
    if isinstance(node, Logic):
        values = [_truth(o, facts) for o in node.operands]
        if node.op == "or":
            return True if True in values else (None if None in values else False)
        return False if False in values else (None if None in values else True)
    if isinstance(node, Fact):
        value = _value(node, facts)
        return None if value is None else bool(value)
    return None


def evaluate(node: Node, facts: Mapping[str, FactValue | None]) -> bool | None:
    """True / False when the facts decide the rule, None when a fact it needs is unknown."""
    return _truth(node, facts)


def _fmt(v: FactValue) -> str:
    if isinstance(v, float):
        if v.is_integer() and abs(v) >= 1:
            return f"{int(v):,}"
        return f"{v:,.2f}".rstrip("0").rstrip(".") if abs(v) >= 0.01 else f"{v:g}"
    return str(v)


def _show(node: Node, facts: Mapping[str, FactValue | None], top: bool = True) -> str:
    if isinstance(node, Num):
        return _fmt(node.value)
    if isinstance(node, Text):
        return repr(node.value)
    if isinstance(node, Bool):
        return str(node.value).lower()
    if isinstance(node, Fact):
        v = _value(node, facts)
        return f"{node.name} {_fmt(v) if v is not None else '?'}"
    if isinstance(node, Neg):
        return f"-{_show(node.operand, facts, False)}"
    if isinstance(node, Arith):
        inner = f"{_show(node.left, facts, False)} {_SYMBOL.get(node.op, node.op)} {_show(node.right, facts, False)}"
        v = _value(node, facts)
        if top and v is not None:
            return f"{inner} = {_fmt(v)}"
        return inner if top else f"({inner})"
    if isinstance(node, Compare):
        if node.op == "==" and isinstance(node.right, Text | Bool):  # "dtype bfloat16", not "… = 'bfloat16'"
            return _show(node.left, facts)
        return f"{_show(node.left, facts)} {_SYMBOL.get(node.op, node.op)} {_show(node.right, facts)}"
    if isinstance(node, Not):
        return f"not ({_show(node.operand, facts)})"
    return ""


def explain(node: Node, facts: Mapping[str, FactValue | None]) -> str:
    """The arithmetic that made a rule true, with the values filled in, e.g.
    'gpu_blocks 512 × block_size 16 = 8,192 < max_model_len 32,768'. Only the parts that hold are shown."""
    if isinstance(node, Logic):
        if node.op == "or":
            held = [o for o in node.operands if _truth(o, facts)]
            return explain(held[0] if held else node.operands[0], facts)
        shown = [o for o in node.operands if not _is_guard(o, node.operands)]
        return " and ".join(explain(o, facts) for o in shown or node.operands)
    return _show(node, facts)


def _is_guard(node: Node, siblings: tuple[Node, ...]) -> bool:
    """'gpu_blocks > 0' next to 'gpu_blocks * block_size < …': a guard the reader does not need to see."""
    if not (isinstance(node, Compare) and isinstance(node.left, Fact) and isinstance(node.right, Num)):
        return False
    return any(o is not node and node.left.name in fact_names(o) for o in siblings)
