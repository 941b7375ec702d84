"""The labeling service: a GraphQL API over projects, tags and jobs; calls extractors and models."""
