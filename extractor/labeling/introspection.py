"""Introspection counted like any other query, and the common introspection queries answered
from a cache.

An introspection reply depends on the schema alone, so what a selection inside ``__schema`` or
``__type`` costs is known exactly before anything runs: :func:`introspection_children` says
which schema elements each introspection field returns, and the query walk
(:mod:`extractor.labeling.query_limits`) counts every value the reply would hold. It used to
skip ``__`` fields: 10 aliases of ``__schema`` spreading fragments of ``types`` returned 22.8 MB
after 10.5 s of CPU.

A request made only of introspection may cost as much as the schema's full description (the
standard query of ``graphql.get_introspection_query`` with every option: 2,048 values, 46 KB
here), even where that is above ``max_query_cost``; anything larger is refused. Its answer is
kept, per query text, so tools that introspect on every start cost a dictionary look-up.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from functools import cache
from typing import Any

from graphql import (
    DocumentNode,
    FieldNode,
    FragmentDefinitionNode,
    FragmentSpreadNode,
    GraphQLEnumType,
    GraphQLInputObjectType,
    GraphQLInterfaceType,
    GraphQLObjectType,
    GraphQLSchema,
    GraphQLWrappingType,
    InlineFragmentNode,
    OperationDefinitionNode,
    SelectionSetNode,
    StringValueNode,
    VariableNode,
    execute_sync,
    get_introspection_query,
    is_abstract_type,
    parse,
    print_ast,
    validate,
)

# Answers kept at once (each twice: under the text sent and the text printed): each is at most
# one schema description (46 KB), its keys two query texts.
CACHED_ANSWERS = 32


def _fields(element: Any) -> Iterable[Any]:
    """The fields of an object or interface type."""
    if isinstance(element, GraphQLObjectType | GraphQLInterfaceType):
        return element.fields.values()
    return ()


def _interfaces(element: Any) -> Iterable[Any]:
    if isinstance(element, GraphQLObjectType | GraphQLInterfaceType):
        return element.interfaces
    return ()


def _enum_values(element: Any) -> Iterable[Any]:
    return element.values.values() if isinstance(element, GraphQLEnumType) else ()


def _input_fields(element: Any) -> Iterable[Any]:
    return element.fields.values() if isinstance(element, GraphQLInputObjectType) else ()


def _of_type(element: Any) -> Iterable[Any]:
    return (element.of_type,) if isinstance(element, GraphQLWrappingType) else ()


def _args(element: Any) -> Iterable[Any]:
    args = getattr(element, "args", None)
    return args.values() if isinstance(args, dict) else ()


def _type(element: Any) -> Iterable[Any]:
    return (element.type,)


# For each introspection type's fields that lead to other schema elements: the introspection
# type of what they return and, for one element, the elements returned (a list flattened, a
# null left out). Every other field is a leaf.
Children = Callable[[GraphQLSchema, Any], Iterable[Any]]
INTROSPECTION_FIELDS: dict[tuple[str, str], tuple[str, Children]] = {
    ("__Schema", "types"): ("__Type", lambda schema, _: schema.type_map.values()),
    ("__Schema", "queryType"): ("__Type", lambda schema, _: (schema.query_type,)),
    ("__Schema", "mutationType"): ("__Type", lambda schema, _: (schema.mutation_type,)),
    ("__Schema", "subscriptionType"): ("__Type", lambda schema, _: (schema.subscription_type,)),
    ("__Schema", "directives"): ("__Directive", lambda schema, _: schema.directives),
    ("__Type", "fields"): ("__Field", lambda _, element: _fields(element)),
    ("__Type", "interfaces"): ("__Type", lambda _, element: _interfaces(element)),
    (
        "__Type",
        "possibleTypes",
    ): (
        "__Type",
        lambda schema, element: (
            schema.get_possible_types(element) if is_abstract_type(element) else ()
        ),
    ),
    ("__Type", "enumValues"): ("__EnumValue", lambda _, element: _enum_values(element)),
    ("__Type", "inputFields"): ("__InputValue", lambda _, element: _input_fields(element)),
    ("__Type", "ofType"): ("__Type", lambda _, element: _of_type(element)),
    ("__Field", "args"): ("__InputValue", lambda _, element: _args(element)),
    ("__Field", "type"): ("__Type", lambda _, element: _type(element)),
    ("__InputValue", "type"): ("__Type", lambda _, element: _type(element)),
    ("__Directive", "args"): ("__InputValue", lambda _, element: _args(element)),
    # A list of enum values: a leaf, but as many values in the reply as locations.
    ("__Directive", "locations"): ("", lambda _, element: element.locations),
}


def introspection_children(
    schema: GraphQLSchema,
    kind: str,
    field: str,
    elements: list[Any],
    arguments: Mapping[str, Any] | None = None,
) -> tuple[str, list[Any]] | None:
    """What the introspection field ``field`` of ``kind`` returns for ``elements``: the
    introspection type and every element of the reply, or None for a leaf.

    ``__schema`` and ``__type(name:)`` are the roots (``kind`` ``Query``); ``arguments`` holds
    ``__type``'s name when it is known.
    """
    if kind not in ("__Schema", "__Type", "__Field", "__InputValue", "__EnumValue", "__Directive"):
        if field == "__schema":
            return "__Schema", [schema]
        if field == "__type":
            name = (arguments or {}).get("name")
            if isinstance(name, str):
                found = schema.get_type(name)
                return "__Type", [] if found is None else [found]
            # A name not known yet: the largest answer any name could have.
            return "__Type", [max(schema.type_map.values(), key=lambda t: len(list(_fields(t))))]
        return None
    entry = INTROSPECTION_FIELDS.get((kind, field))
    if entry is None:
        return None
    child_kind, children = entry
    found_elements = [
        child for element in elements for child in children(schema, element) if child is not None
    ]
    return child_kind, found_elements


def type_name_argument(node: FieldNode, variables: Mapping[str, Any]) -> dict[str, Any]:
    """``__type``'s ``name`` argument, when given as a literal or a variable's value."""
    for argument in node.arguments or ():
        if argument.name.value != "name":
            continue
        if isinstance(argument.value, StringValueNode):
            return {"name": argument.value.value}
        if isinstance(argument.value, VariableNode):
            return {"name": variables.get(argument.value.name.value)}
    return {}


def _all_options_query() -> str:
    """graphql-core's standard introspection query with every option it has turned on."""
    # Its options differ between graphql-core versions: turn on whichever are booleans.
    import inspect

    options = {
        name: True
        for name, parameter in inspect.signature(get_introspection_query).parameters.items()
        if isinstance(parameter.default, bool)
    }
    return get_introspection_query(**options)


@cache
def full_description_cost(schema: GraphQLSchema) -> int:
    """What the schema's full description costs: the standard introspection query with every
    option, counted like any query; the most a request of introspection alone may cost."""
    from extractor.labeling.query_limits import introspection_cost

    return introspection_cost(schema, parse(_all_options_query()))


def root_fields(
    operation: OperationDefinitionNode,
    fragment: Callable[[str], FragmentDefinitionNode | None],
) -> Iterable[str]:
    """The names of an operation's root fields, its fragments expanded (each once)."""
    pending: list[SelectionSetNode] = [operation.selection_set]
    expanded: set[str] = set()
    while pending:
        for selection in pending.pop().selections:
            if isinstance(selection, FieldNode):
                yield selection.name.value
            elif isinstance(selection, InlineFragmentNode):
                pending.append(selection.selection_set)
            elif isinstance(selection, FragmentSpreadNode):
                definition = fragment(selection.name.value)
                if definition is not None and selection.name.value not in expanded:
                    expanded.add(selection.name.value)
                    pending.append(definition.selection_set)


def is_introspection(
    operation: OperationDefinitionNode,
    fragment: Callable[[str], FragmentDefinitionNode | None],
) -> bool:
    """Whether an operation asks for introspection (``__schema``, ``__type``, ``__typename``)
    and nothing else."""
    names = list(root_fields(operation, fragment))
    return bool(names) and all(name.startswith("__") for name in names)


def chosen_operation(
    document: DocumentNode, operation_name: str | None
) -> OperationDefinitionNode | None:
    """The operation a request runs: the one named, or the only one."""
    operations = [d for d in document.definitions if isinstance(d, OperationDefinitionNode)]
    if operation_name:
        named = [o for o in operations if o.name is not None and o.name.value == operation_name]
        return named[0] if len(named) == 1 else None
    return operations[0] if len(operations) == 1 else None


class IntrospectionAnswers:
    """Replies to introspection-only requests without variables, kept per query text.

    Such a reply depends on the schema alone: the first request runs it (validation included),
    the next ones get the same data. Least recently used answers go first.
    """

    def __init__(self, size: int = CACHED_ANSWERS) -> None:
        self.size = size
        self._answers: OrderedDict[tuple[int, str, str | None], dict[str, Any]] = OrderedDict()
        self._lock = threading.Lock()

    def answer(
        self,
        schema: GraphQLSchema,
        document: DocumentNode,
        operation_name: str | None,
        source: str = "",
    ) -> dict[str, Any] | None:
        """The reply (``{"data": ...}``) to a cacheable introspection request, else None.

        Kept under the query's ``source`` text as sent (a tool sends the same text each time)
        and under its printed form, the same for any spelling (printing it costs 14 ms).
        """
        sent = (id(schema), source, operation_name)
        with self._lock:
            found = self._answers.get(sent) if source else None
            if found is not None:
                self._answers.move_to_end(sent)
                return found
        operation = chosen_operation(document, operation_name)
        fragments = {
            d.name.value: d for d in document.definitions if isinstance(d, FragmentDefinitionNode)
        }
        if (
            operation is None
            or operation.variable_definitions
            or not is_introspection(operation, fragments.get)
        ):
            return None
        key = (id(schema), print_ast(document), operation_name)
        with self._lock:
            found = self._answers.get(key)
            if found is not None:
                self._remember(sent, found)
                return found
        if validate(schema, document):
            return None  # answered the usual way, with its errors
        result = execute_sync(schema, document, operation_name=operation_name)
        if result.errors:
            return None
        answer = {"data": result.data}
        with self._lock:
            self._remember(key, answer)
            self._remember(sent, answer)
        return answer

    def _remember(self, key: tuple[int, str, str | None], answer: dict[str, Any]) -> None:
        """Keep ``answer`` under ``key`` as the newest, dropping the oldest beyond the size
        (an empty source text is never a key). Called with the lock held."""
        if not key[1]:
            return
        self._answers[key] = answer
        self._answers.move_to_end(key)
        while len(self._answers) > self.size:
            self._answers.popitem(last=False)
