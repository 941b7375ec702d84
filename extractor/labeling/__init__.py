"""The labeling service: a GraphQL API over projects, tags and jobs that calls extractors and models."""
