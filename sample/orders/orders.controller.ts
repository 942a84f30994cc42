import { Body, Controller, Get, NotFoundException, Param, Post } from '@nestjs/common';
import { CreateOrderDto } from './create-order.dto';
import { Order } from './order.entity';
import { OrdersService } from './orders.service';
import { ParseCreateOrderPipe } from './parse-create-order.pipe';

@Controller('orders')
export class OrdersController {
  constructor(private readonly orders: OrdersService) {}

  /** Places an order; `OrderCreated` is published once the order is committed. */
  @Post()
  create(@Body(ParseCreateOrderPipe) dto: CreateOrderDto): Promise<Order> {
    return this.orders.create(dto);
  }

  @Get(':id')
  async findOne(@Param('id') id: string): Promise<Order> {
    const order = await this.orders.findOne(id);
    if (order === null) throw new NotFoundException(`Order ${id} not found`);
    return order;
  }
}
