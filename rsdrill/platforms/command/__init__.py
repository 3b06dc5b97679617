"""The kinds done the same way on every platform, through the server itself: `stepdown`
(replSetStepDown) and `mongodb-fail-command` (the failCommand fail point). Every platform has
them: each module here, named as the kind's own module in `rsdrill/faults/`, has the kind's
`injector`, which `platforms.base.injector_factory` takes instead of a platform's."""
