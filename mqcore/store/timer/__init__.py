"""Timer messages (RocketMQ 5's ``TimerMessageStore``): a message with ``TIMER_DELIVER_MS``,
``TIMER_DELAY_SEC``, ``TIMER_DELAY_MS`` or ``__STARTDELIVERTIME`` is held in
``rmq_sys_wheel_timer`` and put to its real topic when its second comes.

``rewrite``: the put-time decision (the store writer calls it for every protocol);
``files``: the timerlog, timerwheel and timercheck files in Apache 5.3.3's layout;
``service``: the thread that moves timers into the wheel and due ones out of it;
``recall``: recall handles.
"""
