"""What every model family shares: the :class:`~.explanation.Explanation` type and the
:class:`~.explanation.ModelExplainer` protocol (:mod:`.explanation`), what a family is and how its
networks are found (:mod:`.family`), the method-spec type (:mod:`.methods`), the name registry
(:mod:`.registry`), the input checks (:mod:`.validation`), the images'
normalisation (:mod:`.normalisation`), and the streamed pass with its adapter
base, tensors and conservative rules (:mod:`.adapter`, :mod:`.streaming`, :mod:`.tensors`,
:mod:`.conservative`, :mod:`.pass_explainer`). Nothing here knows a family's internals."""
