"""CC102, `all_gather_object` on a tensor: gather into a preallocated tensor instead (unsafe).

    dist.all_gather_object(out, t)  ->  out_tensor = t.new_empty((dist.get_world_size(), *t.shape))
                                        dist.all_gather_into_tensor(out_tensor, t)
                                        out[:] = out_tensor.unbind(0)

The list still holds one tensor per rank afterwards. A tensor expression that is not a plain
name is bound to a variable first, so it is evaluated once. Unsafe: every rank must now pass a
tensor of the same shape and dtype on the device its backend expects (NCCL: CUDA), which
`all_gather_object` did not require.
"""

from __future__ import annotations

import libcst as cst

from collcheck.adopt.blocks import (
    call_statement,
    enclosing_block,
    fresh_name,
    parse_statements,
    with_statements,
)
from collcheck.adopt.rewrite import Rewrite, Source
from collcheck.checks import cc102_all_gather_object_on_tensors as cc102
from collcheck.findings import Applicability, Finding

RULE = cc102.CODE
VARIANTS = frozenset({cc102.Variant.TENSOR})


def _parts(call: cst.Call) -> tuple[str, cst.Name, cst.BaseExpression, cst.Arg | None] | None:
    """(module, output list, tensor, group argument) of `X.all_gather_object(out, obj[, group=g])`."""
    func = call.func
    if not isinstance(func, cst.Attribute) or func.attr.value != "all_gather_object":
        return None
    positional = [arg for arg in call.args if arg.keyword is None and not arg.star]
    keywords = {arg.keyword.value: arg for arg in call.args if arg.keyword is not None}
    if len(positional) != 2 or set(keywords) - {"group"} or len(call.args) != 2 + len(keywords):
        return None
    output = positional[0].value
    if not isinstance(output, cst.Name):
        return None
    return cst.Module([]).code_for_node(func.value), output, positional[1].value, keywords.get("group")


def fix(source: Source, finding: Finding) -> Rewrite | None:
    statement = call_statement(source, finding.location.line)
    block = enclosing_block(source, statement) if statement is not None else None
    if statement is None or block is None:
        return None
    expression = statement.body[0]
    assert isinstance(expression, cst.Expr) and isinstance(expression.value, cst.Call)
    parts = _parts(expression.value)
    if parts is None:
        return None
    dist, output, tensor, group = parts
    lines = []
    local = source.code(tensor).strip()
    if not isinstance(tensor, cst.Name):
        local_name = fresh_name(source, f"{output.value}_local")
        lines.append(f"{local_name} = {local}")
        local = local_name
    stacked = fresh_name(source, f"{output.value}_tensor")
    group_code = source.code(group.value).strip() if group is not None else ""
    group_kw = f", group={group_code}" if group is not None else ""
    lines += [
        f"{stacked} = {local}.new_empty(({dist}.get_world_size({group_code}), *{local}.shape))",
        f"{dist}.all_gather_into_tensor({stacked}, {local}{group_kw})",
        f"{output.value}[:] = {stacked}.unbind(0)",
    ]
    new = parse_statements(source, "\n".join(lines) + "\n")
    new[0] = new[0].with_changes(leading_lines=statement.leading_lines)
    trailing = statement.trailing_whitespace
    new[-1] = new[-1].with_changes(trailing_whitespace=trailing)
    text = source.replaced(block, with_statements(block, statement, new))
    return Rewrite(
        text, Applicability.UNSAFE, "gather into a preallocated tensor with all_gather_into_tensor"
    )
