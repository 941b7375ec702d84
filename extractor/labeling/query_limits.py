"""What one GraphQL request may ask for, checked on its parsed document before anything runs.

A 6 KB query of 100 aliased ``getProject`` fields used to return 85 MB (peak 792 MB), and one
15 KB request queued 300 jobs. The checks here bound a request by its shape: lexical tokens
(at parse time), selection depth, aliases, a cost that counts fields and the documents each
``documents`` page may return, and at most one mutation that creates a job. Each refusal is a
``LIMIT_EXCEEDED`` error naming its setting.

Introspection is walked like the rest (issue 18): its aliases and depth count, and its cost is
exact, every value its reply would hold (:mod:`extractor.labeling.introspection`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from graphql import (
    ASTValidationRule,
    DocumentNode,
    FieldNode,
    FragmentDefinitionNode,
    FragmentSpreadNode,
    GraphQLError,
    GraphQLSchema,
    InlineFragmentNode,
    IntValueNode,
    ListValueNode,
    MaxIntrospectionDepthRule,
    OperationDefinitionNode,
    OperationType,
    SelectionSetNode,
    ValidationRule,
    VariableNode,
    get_named_type,
    parse,
    validate,
)

from extractor.config import LabelingSettings
from extractor.labeling.errors import LimitExceededError
from extractor.labeling.introspection import (
    full_description_cost,
    introspection_children,
    type_name_argument,
)

# The one field that reads a whole document from the database and sends it back.
IMPORTABLE_COST = 10
# The type a mutation returns when it queues work: the one-per-request rule is derived from it.
JOB_TYPE = "Job"
# Fields whose list argument says how many objects their selection is repeated for.
PAGE_ARGUMENT = {"documents": "limit", "getJobs": "jobIds"}


def limit_error(settings: LabelingSettings, name: str, message: str) -> GraphQLError:
    """A GraphQL error for a request over the setting ``name``, with the LIMIT_EXCEEDED code."""
    error = LimitExceededError.of_setting(settings, name, message)
    return GraphQLError(error.message, extensions=error.extensions)


def parse_bounded(source: str, settings: LabelingSettings) -> DocumentNode:
    """Parse a query, giving up past ``max_query_tokens`` tokens or comments (LIMIT_EXCEEDED).

    Other syntax errors are raised as graphql-core reports them.
    """
    maximum = settings.max_query_tokens
    try:
        return parse(source, max_lexical_tokens=maximum, max_comments=maximum)
    except GraphQLError as exc:
        # graphql-core's own nesting guard ("nested too deeply") stays a parse error.
        if exc.message.startswith("Syntax Error: Document contains more than"):
            raise limit_error(settings, "max_query_tokens", "The query is too long") from exc
        raise


@dataclass
class Tally:
    """What walking one operation found: its deepest field, its aliases, its cost (of the
    service's fields, and of introspection apart), and the selections visited to find them."""

    depth: int = 0
    aliases: int = 0
    cost: int = 0
    introspection: int = 0
    steps: int = 0

    @property
    def total(self) -> int:
        """The whole operation's cost."""
        return self.cost + self.introspection


# Inside introspection: the introspection type being selected and every schema element the
# selection is resolved for (``__Type`` and the 33 types, say).
Place = tuple[str, list[Any]]


class OperationWalk:
    """Walks one operation's selections, fragments expanded, and tallies what they ask for.

    Every selection visited (fragment spreads included) is a step and steps stop the walk at
    the cost limit, so fragments that spread others twice cannot make the walk itself slow.
    """

    def __init__(
        self,
        settings: LabelingSettings,
        variables: Mapping[str, Any],
        fragment: Callable[[str], FragmentDefinitionNode | None],
        schema: GraphQLSchema,
        budget: float,
    ) -> None:
        self.settings = settings
        self.variables = variables
        self.fragment = fragment
        self.schema = schema
        self.budget = budget
        self.tally = Tally()

    def over_budget(self) -> bool:
        """Whether the walk has already cost (or taken) more than ``budget`` allows."""
        return self.tally.total > self.budget or self.tally.steps > self.budget

    def repeat(self, node: FieldNode) -> int:
        """How many objects a field's selection is resolved for: its page size or id count."""
        argument = PAGE_ARGUMENT.get(node.name.value)
        if argument is None:
            return 1
        value_node = next((a.value for a in node.arguments or () if a.name.value == argument), None)
        value: Any = None
        if isinstance(value_node, IntValueNode):
            value = int(value_node.value)
        elif isinstance(value_node, ListValueNode):
            value = len(value_node.values)
        elif isinstance(value_node, VariableNode):
            value = self.variables.get(value_node.name.value)
            value = len(value) if isinstance(value, list) else value
        if argument == "jobIds":
            return max(1, value if isinstance(value, int) else 1)
        if not isinstance(value, int) or isinstance(value, bool):
            value = self.settings.max_documents_page
        # A longer page is refused by its resolver with its own, clearer error.
        return max(0, min(value, self.settings.max_documents_page))

    def walk(
        self,
        selections: SelectionSetNode,
        depth: int,
        repeat: int,
        path: frozenset[str],
        place: Place | None = None,
    ) -> None:
        """Tally ``selections`` found ``depth`` fields deep, each resolved ``repeat`` times, or
        for each element of ``place`` inside introspection."""
        for selection in selections.selections:
            if self.over_budget():
                return
            self.tally.steps += 1
            if isinstance(selection, FieldNode):
                if selection.alias is not None:
                    self.tally.aliases += 1
                self.tally.depth = max(self.tally.depth, depth)
                name = selection.name.value
                if place is not None or name.startswith("__"):
                    self.walk_introspection(selection, depth, repeat, path, place)
                    continue
                weight = IMPORTABLE_COST if name == "importable" else 1
                self.tally.cost += repeat * weight
                if selection.selection_set is not None:
                    self.walk(
                        selection.selection_set, depth + 1, repeat * self.repeat(selection), path
                    )
            elif isinstance(selection, InlineFragmentNode):
                self.walk(selection.selection_set, depth, repeat, path, place)
            elif isinstance(selection, FragmentSpreadNode):
                name = selection.name.value
                definition = self.fragment(name)
                if definition is not None and name not in path:  # cycles: NoFragmentCycles
                    self.walk(definition.selection_set, depth, repeat, path | {name}, place)

    def walk_introspection(
        self, node: FieldNode, depth: int, repeat: int, path: frozenset[str], place: Place | None
    ) -> None:
        """Tally one introspection field: one value per element it is resolved for (a list of
        enum values: each value), and its selection for every element it returns.

        ``ofType`` adds no depth: it is a chain as long as the schema's type wrapping (then
        null), which the standard introspection query asks for nine levels deep.
        """
        kind, elements = place if place is not None else ("Query", [None] * repeat)
        name = node.name.value
        arguments = type_name_argument(node, self.variables) if name == "__type" else None
        found = introspection_children(self.schema, kind, name, elements, arguments)
        values = len(elements)
        if found is not None and found[0] == "":
            values += len(found[1])
        self.tally.introspection += values
        if found is None or found[0] == "" or node.selection_set is None:
            return
        child_depth = depth if name == "ofType" else depth + 1
        self.walk(node.selection_set, child_depth, repeat, path, found)

    def job_mutations(self, operation: OperationDefinitionNode, schema: GraphQLSchema) -> int:
        """Root fields of a mutation that return a ``Job`` (fragments on Mutation included)."""
        mutation_type = schema.mutation_type
        if operation.operation != OperationType.MUTATION or mutation_type is None:
            return 0
        count = 0
        pending = [operation.selection_set]
        expanded: set[str] = set()
        while pending:
            for selection in pending.pop().selections:
                if isinstance(selection, FieldNode):
                    found = mutation_type.fields.get(selection.name.value)
                    if found is not None and get_named_type(found.type).name == JOB_TYPE:
                        count += 1
                elif isinstance(selection, InlineFragmentNode):
                    pending.append(selection.selection_set)
                elif isinstance(selection, FragmentSpreadNode):
                    definition = self.fragment(selection.name.value)
                    if definition is not None and selection.name.value not in expanded:
                        expanded.add(selection.name.value)
                        pending.append(definition.selection_set)
        return count


def query_limit_rules(
    settings: LabelingSettings, variables: Mapping[str, Any]
) -> list[type[ASTValidationRule]]:
    """Validation rules enforcing ``settings``' query limits for a request with ``variables``."""

    class QueryLimitsRule(ValidationRule):
        """Refuses an operation deeper, more aliased, costlier or with more job mutations
        than the settings allow."""

        def enter_operation_definition(self, node: OperationDefinitionNode, *_: Any) -> None:
            schema = self.context.schema
            # Introspection alone may cost as much as the schema's full description.
            allowance = max(settings.max_query_cost, full_description_cost(schema))
            walk = OperationWalk(settings, variables, self.context.get_fragment, schema, allowance)
            walk.walk(node.selection_set, 1, 1, frozenset())
            tally = walk.tally
            limit = allowance if tally.cost == 0 else settings.max_query_cost
            if walk.over_budget() or max(tally.total, tally.steps) > limit:
                message = "The query asks for too much"
                if tally.introspection:
                    message += (
                        f" (introspection alone may cost {allowance}, the schema's full "
                        "description; with other fields, introspection counts like them)"
                    )
                self.report_error(limit_error(settings, "max_query_cost", message))
            if tally.depth > settings.max_query_depth:
                self.report_error(
                    limit_error(settings, "max_query_depth", "The query is nested too deeply")
                )
            if tally.aliases > settings.max_query_aliases:
                self.report_error(
                    limit_error(settings, "max_query_aliases", "The query has too many aliases")
                )
            if walk.job_mutations(node, self.context.schema) > 1:
                self.report_error(
                    GraphQLError(
                        "At most one mutation that starts a job may be sent in one request",
                        extensions=LimitExceededError(
                            "", limit="job mutations per request", maximum=1
                        ).extensions,
                    )
                )

    return [QueryLimitsRule, MaxIntrospectionDepthRule]


def introspection_cost(schema: GraphQLSchema, document: DocumentNode) -> int:
    """What the first operation of ``document`` costs in introspection values, unbounded
    (the standard query's cost is measured so, once per schema)."""
    fragments = {
        d.name.value: d for d in document.definitions if isinstance(d, FragmentDefinitionNode)
    }
    operation = next(d for d in document.definitions if isinstance(d, OperationDefinitionNode))
    walk = OperationWalk(LabelingSettings(), {}, fragments.get, schema, float("inf"))
    walk.walk(operation.selection_set, 1, 1, frozenset())
    return walk.tally.introspection


def limit_errors(
    schema: GraphQLSchema,
    document: DocumentNode,
    settings: LabelingSettings,
    variables: Mapping[str, Any],
) -> list[GraphQLError]:
    """The limit errors of a parsed request, found before (and instead of) the full validation,
    whose overlapping-fields rule is quadratic in the fields a request repeats."""
    return validate(schema, document, query_limit_rules(settings, variables))
